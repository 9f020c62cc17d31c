"""The shapes readers share: message/turn shapes, conversation-file helpers, per-call logs, head shapes, tool schemas,
session helpers, media columns, rendered prompts."""

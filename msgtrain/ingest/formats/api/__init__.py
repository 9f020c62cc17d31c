"""Per-call API logs and recorded cassettes: one request/response per record (OpenAI, Anthropic, Bedrock, Cohere,
Gemini, Ollama, batches, VCR cassettes)."""

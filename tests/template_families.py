"""More real chat-template families for the token-exactness oracle, one table row each.

Each family is a model's own chat template as llama.cpp vendors it (``models/templates/`` in the llama-cpp-python
source distribution, tests/assets.py) over Qwen3's vocabulary from ../shared, with the special tokens the template
writes that Qwen3 lacks added as special tokens (tests/conftest.py ``shaped_tokenizer_folder``). Text between those
tokens is encoded by Qwen3's BPE: the families differ from their real models in how plain text is split, never in
where a control token stands, which is what msgtrain's template handling depends on.

A row also says, for the oracle (tests/oracle.py), which tokens end an assistant turn in the template's rendering
(``end_of_turn``: the tokens, and whether the turn ends at the ``first`` or the ``last`` of them), which control-token
text a user, a tool or a schema may carry (``inject``), and how the template treats tools (``tools``: ``any``,
``none`` when it cannot represent tool calls, ``single`` when it renders one call per message, ``required`` when it
fails without tools). ``stop`` is what the model's generation_config.json lists as ``eos_token_id`` (what stops
generation besides ``eos``), or empty where the folder has none and msgtrain must find the stop tokens itself.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class TemplateFamily:
    template: str  # models/templates/<template>.jinja
    added: tuple[str, ...]
    bos: str | None
    eos: str
    end_of_turn: tuple[str, ...]
    inject: tuple[str, ...]
    stop: tuple[str, ...] = ()
    which: str = "first"
    tools: str = "any"


CHATML_INJECT = ("<|im_start|>", "<|im_end|>", "<tool_call>", "</think>")
DEEPSEEK = ("<｜User｜>", "<｜Assistant｜>")
MISTRAL_SMALL = (
    "[INST]",
    "[/INST]",
    "[SYSTEM_PROMPT]",
    "[/SYSTEM_PROMPT]",
    "[TOOL_CALLS]",
    "[ARGS]",
    "[CALL_ID]",
    "[AVAILABLE_TOOLS]",
    "[/AVAILABLE_TOOLS]",
    "[TOOL_RESULTS]",
    "[/TOOL_RESULTS]",
    "[TOOL_CONTENT]",
    "[IMG]",
)

# Kimi K2's control tokens (its Thinking variant's template writes the same).
KIMI_K2 = (
    "<|im_system|>",
    "<|im_user|>",
    "<|im_assistant|>",
    "<|im_middle|>",
    "<|tool_calls_section_begin|>",
    "<|tool_calls_section_end|>",
    "<|tool_call_begin|>",
    "<|tool_call_argument_begin|>",
    "<|tool_call_end|>",
    "<|media_start|>",
    "<|media_content|>",
    "<|media_end|>",
    "<|media_pad|>",
)
# GLM-4.6 / 4.7's control tokens: role headers (the turn ends at the next one) and tool-call argument tags.
GLM = (
    "[gMASK]",
    "<sop>",
    "<|system|>",
    "<|user|>",
    "<|assistant|>",
    "<|observation|>",
    "<arg_key>",
    "</arg_key>",
    "<arg_value>",
    "</arg_value>",
)
# Poolside Laguna's templates (XS.2, S-2.1): XML-like role tags, the turn ends with </assistant>.
LAGUNA: tuple[tuple[str, ...], None, str, tuple[str, ...], tuple[str, ...]] = (
    tuple(
        f"<{end}{tag}>"
        for tag in ("system", "user", "assistant", "available_tools", "arg_key", "arg_value")
        for end in ("", "/")
    ),
    None,
    "</assistant>",
    ("</assistant>",),
    ("<user>", "</assistant>", "<tool_call>", "<arg_key>", "</think>"),
)

FAMILIES: dict[str, TemplateFamily] = {
    "lfm2": TemplateFamily(
        "LFM2-8B-A1B",
        ("<|tool_list_start|>", "<|tool_list_end|>", "<|tool_response_start|>", "<|tool_response_end|>"),
        "<|startoftext|>",
        "<|im_end|>",
        ("<|im_end|>",),
        ("<|im_start|>", "<|im_end|>", "<|tool_list_start|>", "<|tool_response_end|>"),
    ),
    "lfm2.5": TemplateFamily(
        "LFM2.5-8B-A1B",
        ("<|tool_call_start|>", "<|tool_call_end|>"),
        "<|startoftext|>",
        "<|im_end|>",
        ("<|im_end|>",),
        ("<|im_start|>", "<|im_end|>", "<|tool_call_start|>", "</think>"),
    ),
    "lfm2.5-instruct": TemplateFamily(
        "LFM2.5-Instruct", (), "<|startoftext|>", "<|im_end|>", ("<|im_end|>",), ("<|im_start|>", "<|im_end|>")
    ),
    "minicpm5": TemplateFamily(
        "openbmb-MiniCPM5-1B", ("<tool_sep>", "<tool_def_sep>"), None, "<|im_end|>", ("<|im_end|>",), CHATML_INJECT
    ),
    "laguna-xs.2": TemplateFamily("poolside-Laguna-XS.2", *LAGUNA),
    "laguna-s-2.1": TemplateFamily("poolside-Laguna-S-2.1", *LAGUNA),
    "kimi-k2-thinking": TemplateFamily(
        "Kimi-K2-Thinking",
        KIMI_K2,
        None,
        "<|im_end|>",
        ("<|im_end|>",),
        ("<|im_user|>", "<|im_end|>", "<|im_middle|>", "</think>"),
    ),
    "kimi-k3": TemplateFamily(
        "Kimi-K3",
        ("<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>", "<|kimi_image_placeholder|>"),
        None,
        "<|end_of_msg|>",
        ("<|end_of_msg|>",),
        ("<|open|>", "<|close|>", "<|sep|>", "<|end_of_msg|>"),
    ),
    "cohere2moe": TemplateFamily(
        "Cohere2MoE",
        (
            "<|START_OF_TURN_TOKEN|>",
            "<|END_OF_TURN_TOKEN|>",
            "<|SYSTEM_TOKEN|>",
            "<|USER_TOKEN|>",
            "<|CHATBOT_TOKEN|>",
            "<|START_TEXT|>",
            "<|END_TEXT|>",
            "<|START_THINKING|>",
            "<|END_THINKING|>",
            "<|START_ACTION|>",
            "<|END_ACTION|>",
            "<|START_TOOL_RESULT|>",
            "<|END_TOOL_RESULT|>",
            "<|IMG_PATCH|>",
        ),
        "<BOS_TOKEN>",
        "<|END_OF_TURN_TOKEN|>",
        ("<|END_OF_TURN_TOKEN|>",),
        ("<|START_OF_TURN_TOKEN|>", "<|END_OF_TURN_TOKEN|>", "<|START_TEXT|>", "<|END_ACTION|>"),
    ),
    "gigachat3": TemplateFamily(
        "GigaChat3-10B-A1.8B",
        ("<|message_sep|>", "<|role_sep|>"),
        "<s>",
        "</s>",
        ("<|message_sep|>",),
        ("<|message_sep|>", "<|role_sep|>"),
        which="last",
    ),
    "gigachat3.1": TemplateFamily(
        "GigaChat3.1-10B-A1.8B",
        ("<|message_sep|>", "<|role_sep|>", "<|function_call|>"),
        "<s>",
        "</s>",
        ("<|message_sep|>",),
        ("<|message_sep|>", "<|role_sep|>", "<|function_call|>"),
    ),
    "minimax-m1": TemplateFamily(
        "MiniMax-M1",
        ("<beginning_of_sentence>", "<end_of_sentence>", "<begin_of_document>"),
        "<begin_of_document>",
        "<end_of_sentence>",
        ("<end_of_sentence>",),
        ("<beginning_of_sentence>", "<end_of_sentence>", "<tool_calls>"),
    ),
    "minimax-m2": TemplateFamily(
        "MiniMax-M2",
        ("]~!b[", "]~b]", "[e~[", "<minimax:tool_call>", "</minimax:tool_call>"),
        "]~!b[",
        "[e~[",
        ("[e~[",),
        ("]~b]", "[e~[", "<minimax:tool_call>", "</think>"),
    ),
    "minimax-m3": TemplateFamily(
        "MiniMax-M3",
        ("]~!b[", "]~b]", "[e~[", "]<]minimax[>[", "<mm:think>", "</mm:think>", "]<]image[>[", "]<]video[>["),
        "]~!b[",
        "[e~[",
        ("[e~[",),
        ("]~b]", "[e~[", "]<]minimax[>[", "</mm:think>"),
    ),
    "smollm3-real": TemplateFamily(
        "HuggingFaceTB-SmolLM3-3B", (), None, "<|im_end|>", ("<|im_end|>",), CHATML_INJECT, tools="none"
    ),
    "stepfun3.5": TemplateFamily(
        "StepFun3.5-Flash", (), None, "<|im_end|>", ("<|im_end|>",), (*CHATML_INJECT, "<tool_response>")
    ),
    "apriel-1.5": TemplateFamily(
        "unsloth-Apriel-1.5",
        ("<|system|>", "<|user|>", "<|assistant|>", "<|content|>", "<|end|>", "<|tool_result|>"),
        None,
        "<|end|>",
        ("<|end|>",),
        ("<|user|>", "<|assistant|>", "<|end|>", "<tool_calls>"),
    ),
    "apriel-1.6": TemplateFamily(
        "Apriel-1.6-15b-Thinker-fixed",
        (
            "<|begin_system|>",
            "<|begin_user|>",
            "<|begin_assistant|>",
            "<|begin_content|>",
            "<|end|>",
            "<|begin_tool_result|>",
        ),
        None,
        "<|end|>",
        ("<|end|>",),
        ("<|begin_user|>", "<|begin_assistant|>", "<|end|>", "<tool_calls>"),
    ),
    "nemotron-nano-v2": TemplateFamily(
        "NVIDIA-Nemotron-Nano-v2",
        (
            "<SPECIAL_10>",
            "<SPECIAL_11>",
            "<SPECIAL_12>",
            "<TOOLCALL>",
            "</TOOLCALL>",
            "<TOOL_RESPONSE>",
            "</TOOL_RESPONSE>",
            "<AVAILABLE_TOOLS>",
            "</AVAILABLE_TOOLS>",
        ),
        "<SPECIAL_10>",
        "<SPECIAL_12>",
        ("<SPECIAL_12>",),
        ("<SPECIAL_11>", "<SPECIAL_12>", "<TOOLCALL>", "</think>"),
    ),
    "nemotron-3-nano": TemplateFamily(
        "NVIDIA-Nemotron-3-Nano-30B-A3B-BF16", (), None, "<|im_end|>", ("<|im_end|>",), CHATML_INJECT
    ),
    "deepseek-v3.2": TemplateFamily(
        "deepseek-ai-DeepSeek-V3.2",
        DEEPSEEK,
        "<｜begin▁of▁sentence｜>",
        "<｜end▁of▁sentence｜>",
        ("<｜end▁of▁sentence｜>",),
        (*DEEPSEEK, "<｜end▁of▁sentence｜>", "</think>"),
    ),
    "deepseek-v4": TemplateFamily(
        "deepseek-ai-DeepSeek-V4",
        DEEPSEEK,
        "<｜begin▁of▁sentence｜>",
        "<｜end▁of▁sentence｜>",
        ("<｜end▁of▁sentence｜>",),
        (*DEEPSEEK, "<｜end▁of▁sentence｜>", "</think>"),
    ),
    "seed-oss": TemplateFamily(
        "ByteDance-Seed-OSS",
        (
            "<seed:bos>",
            "<seed:eos>",
            "<seed:pad>",
            "<seed:think>",
            "</seed:think>",
            "<seed:tool_call>",
            "</seed:tool_call>",
            "<seed:cot_budget_reflect>",
            "</seed:cot_budget_reflect>",
        ),
        "<seed:bos>",
        "<seed:eos>",
        ("<seed:eos>",),
        ("<seed:bos>", "<seed:eos>", "<seed:tool_call>", "</seed:think>"),
    ),
    "solar-open": TemplateFamily(
        "upstage-Solar-Open-100B",
        (
            "<|begin|>",
            "<|end|>",
            "<|content|>",
            "<|think|>",
            "<|calls|>",
            "<|tool_calls|>",
            "<|tool_call:begin|>",
            "<|tool_call:end|>",
            "<|tool_call:name|>",
            "<|tool_call:args|>",
            "<|tool_response|>",
            "<|tool_response:begin|>",
            "<|tool_response:end|>",
            "<|tool_response:id|>",
            "<|tool_response:name|>",
            "<|tool_response:result|>",
            "<|tools:begin|>",
            "<|tools:end|>",
            "<|tool:begin|>",
            "<|tool:end|>",
        ),
        None,
        "<|end|>",
        ("<|end|>", "<|calls|>"),
        ("<|begin|>", "<|end|>", "<|content|>", "<|calls|>", "<|tool_call:args|>"),
        stop=("<|end|>", "<|calls|>"),
    ),
    "apertus": TemplateFamily(
        "Apertus-8B-Instruct",
        (
            "<|system_start|>",
            "<|system_end|>",
            "<|developer_start|>",
            "<|developer_end|>",
            "<|user_start|>",
            "<|user_end|>",
            "<|assistant_start|>",
            "<|assistant_end|>",
            "<|inner_prefix|>",
            "<|inner_suffix|>",
            "<|tools_prefix|>",
            "<|tools_suffix|>",
        ),
        "<s>",
        "<|assistant_end|>",
        ("<|assistant_end|>", "<|tools_suffix|>"),
        ("<|user_start|>", "<|assistant_end|>", "<|tools_prefix|>", "<|inner_suffix|>"),
        stop=("<|assistant_end|>", "<|tools_suffix|>"),
    ),
    "ling-3": TemplateFamily(
        "inclusionai-ling-3.0-flash",
        ("<role>", "</role>", "<|role_end|>", "<arg_key>", "</arg_key>", "<arg_value>", "</arg_value>"),
        None,
        "<|role_end|>",
        ("<|role_end|>",),
        ("<role>", "<|role_end|>", "<tool_call>", "</think>"),
    ),
    "glm-4.7": TemplateFamily(
        "GLM-4.7-Flash",
        GLM,
        None,
        "<|endoftext|>",
        ("<|user|>", "<|observation|>", "<|endoftext|>"),
        ("<|user|>", "<|observation|>", "<|assistant|>", "</think>", "<arg_key>"),
        stop=("<|endoftext|>", "<|user|>", "<|observation|>"),
    ),
    "reka-edge": TemplateFamily(
        "Reka-Edge", ("<sep>", "<REKA_IMG_TOKEN>"), None, "<sep>", ("<sep>",), ("<sep>", "<tool_call>", "</think>")
    ),
    "bielik-3": TemplateFamily(
        "Bielik-11B-v3.0-Instruct",
        ("<|function_list|>", "<|function_output|>"),
        "<s>",
        "<|im_end|>",
        ("<|im_end|>",),
        (*CHATML_INJECT, "<|function_output|>"),
    ),
    "mimo-vl": TemplateFamily("MiMo-VL", (), None, "<|im_end|>", ("<|im_end|>",), CHATML_INJECT),
    "granite-4.0": TemplateFamily(
        "ibm-granite-granite-4.0",
        ("<|start_of_role|>", "<|end_of_role|>", "<|end_of_text|>"),
        "<|end_of_text|>",
        "<|end_of_text|>",
        ("<|end_of_text|>",),
        ("<|start_of_role|>", "<|end_of_role|>", "<|end_of_text|>", "<tool_call>"),
    ),
    "granite-4.1": TemplateFamily(
        "ibm-granite-granite-4.1",
        ("<|start_of_role|>", "<|end_of_role|>", "<|end_of_text|>"),
        "<|end_of_text|>",
        "<|end_of_text|>",
        ("<|end_of_text|>",),
        ("<|start_of_role|>", "<|end_of_role|>", "<|end_of_text|>", "<tool_call>"),
    ),
    "phi-3.5": TemplateFamily(
        "microsoft-Phi-3.5-mini-instruct",
        ("<|system|>", "<|user|>", "<|assistant|>", "<|end|>"),
        "<s>",
        "<|end|>",
        ("<|end|>",),
        ("<|user|>", "<|assistant|>", "<|end|>"),
        stop=("<|end|>", "<|endoftext|>"),
        tools="none",
    ),
    "mistral-small-3.2": TemplateFamily(
        "Mistral-Small-3.2-24B-Instruct-2506",
        MISTRAL_SMALL,
        "<s>",
        "</s>",
        ("</s>",),
        ("[INST]", "[/INST]", "[TOOL_CALLS]", "[SYSTEM_PROMPT]", "</s>"),
    ),
    "devstral-small": TemplateFamily(
        "unsloth-mistral-Devstral-Small-2507",
        MISTRAL_SMALL,
        "<s>",
        "</s>",
        ("</s>",),
        ("[INST]", "[/INST]", "[TOOL_CALLS]", "[SYSTEM_PROMPT]", "</s>"),
    ),
    "ministral-3-reasoning": TemplateFamily(
        "mistralai-Ministral-3-14B-Reasoning-2512",
        (*MISTRAL_SMALL, "[THINK]", "[/THINK]"),
        "<s>",
        "</s>",
        ("</s>",),
        ("[INST]", "[/INST]", "[TOOL_CALLS]", "[THINK]", "</s>"),
    ),
    "spark-2.5": TemplateFamily(
        "Spark2.5",
        (
            "<｜start▁of▁sentence｜>",
            "<｜end▁of▁sentence｜>",
            "<|System|>",
            "<|User|>",
            "<|Bot|>",
            "<|Tool|>",
            "<arg_key>",
            "</arg_key>",
            "<arg_value>",
            "</arg_value>",
        ),
        None,
        "<｜end▁of▁sentence｜>",
        ("<｜end▁of▁sentence｜>",),
        ("<|User|>", "<|Bot|>", "<｜end▁of▁sentence｜>", "</think>"),
    ),
    "muse-glimmer": TemplateFamily(
        "muse-glimmer",
        ("<|start|>", "<|message|>", "<|eot|>", "<|eom|>", "<|patch|>", "<|video|>"),
        None,
        "<|eot|>",
        ("<|eot|>",),
        ("<|start|>", "<|message|>", "<|eot|>", "<|eom|>"),
        which="last",
    ),
    "hy3": TemplateFamily(
        "tencent-Hy3",
        tuple(f"<｜hy_{t}:opensource｜>" for t in ("begin_of_sentence", "eos", "pad", "User", "Assistant")),
        "<｜hy_begin_of_sentence:opensource｜>",
        "<｜hy_eos:opensource｜>",
        ("<｜hy_eos:opensource｜>",),
        ("<｜hy_User:opensource｜>", "<｜hy_eos:opensource｜>", "<｜hy_Assistant:opensource｜>"),
    ),
}

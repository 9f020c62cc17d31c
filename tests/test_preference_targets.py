"""``--target dpo`` and ``--target kto``: rows TRL's DPOTrainer and KTOTrainer load and train with their defaults, whose
text tokenizes back (as TRL tokenizes it) to exactly the logged ids.

Preference records follow TRL's documented preference format (huggingface/trl docs/source/dataset_formats.md:
``{"prompt", "chosen", "rejected"}``); labelled records LLaMA-Factory's data/kto_en_demo.json shape
(``{"messages", "label"}``), as in tests/test_structural.py.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq
import pytest

from msgtrain.cli import main
from msgtrain.export.preference import TrlText
from tests.conftest import load_named_tokenizer, tiny_llama
from tests.test_rl_groups import rollout

PAIRS = [
    {"prompt": f"Capital of country {i}?", "chosen": f"City {i}.", "rejected": f"Town {i}, maybe?"} for i in range(4)
]
LABELLED = [
    {
        "messages": [{"role": "user", "content": f"Name a prime above {i}."}, {"role": "assistant", "content": str(v)}],
        "label": ok,
    }
    for i in range(3)
    for v, ok in ((7 + 4 * i, True), (9 + 4 * i, False))
]


def _convert(
    tmp_path: Path, name: str, records: Any, target: str, *args: str
) -> tuple[int, list[dict[str, Any]], Path]:
    logs = tmp_path / "logs"
    logs.mkdir(exist_ok=True)
    path = logs / name
    path.write_text(json.dumps(records) if name.endswith(".json") else "".join(json.dumps(r) + "\n" for r in records))
    out = tmp_path / f"out-{target}"
    code = main(["convert", str(path), "-o", str(out), "--target", target, "-q", *args])
    rows = [r for f in sorted((out / "data").glob("*.parquet")) for r in pq.read_table(f).to_pylist()]
    return code, rows, out


def test_dpo_rows_pair_each_chosen_with_its_rejected_on_equal_prompt_tokens(tmp_path: Path) -> None:
    code, rows, out = _convert(tmp_path, "pairs.jsonl", PAIRS, "dpo")
    assert code == 0 and len(rows) == 4
    tok = load_named_tokenizer("demo")
    for row, record in zip(rows, PAIRS, strict=True):
        assert row["chosen"] == record["chosen"] + "<|im_end|>" and row["rejected"] == record["rejected"] + "<|im_end|>"
        assert record["prompt"] in row["prompt"] and row["paired_by"] == "judgement"
        # The ids are the logged rows' tokens: the prompt then each reply, as msgtrain trained them.
        assert tok.decode(row["prompt_ids"] + row["chosen_ids"]) == row["prompt"] + row["chosen"]
    report = json.loads((out / "report.json").read_text())
    assert report["outputs"]["preference"]["pairs"] == 4 and report["turns"]["trained"] == 8  # both sides trained


@pytest.mark.parametrize("target", ["dpo", "kto"])
@pytest.mark.parametrize("fmt", ["parquet", "hf", "jsonl"])
def test_preference_targets_write_exactly_their_schema_in_every_format(tmp_path: Path, target: str, fmt: str) -> None:
    import datasets

    from msgtrain.export.targets import TARGETS

    records, name = (PAIRS, "pairs.jsonl") if target == "dpo" else (LABELLED, "kto.json")
    code, _, out = _convert(tmp_path, name, records, target, "--format", fmt)
    assert code == 0
    if fmt == "hf":
        loaded = datasets.load_from_disk(str(out))["train"]
        assert loaded.features == datasets.Features.from_arrow_schema(TARGETS[target].schema)
        assert loaded.num_rows == (4 if target == "dpo" else 6)
    elif fmt == "jsonl":
        lines = (out / "data" / "train-00000-of-00001.jsonl").read_text().splitlines()
        assert [list(json.loads(line)) for line in lines] == [TARGETS[target].schema.names] * len(lines)
    else:
        assert pq.read_schema(next((out / "data").glob("*.parquet"))).names == TARGETS[target].schema.names


def test_kto_rows_carry_each_judged_reply_with_its_label(tmp_path: Path) -> None:
    code, rows, _ = _convert(tmp_path, "kto.json", LABELLED, "kto")
    assert code == 0
    assert [(r["completion"], r["label"]) for r in rows] == [
        (f"{v}<|im_end|>", ok) for i in range(3) for v, ok in ((7 + 4 * i, True), (9 + 4 * i, False))
    ]


def test_ranked_answers_pair_each_worse_one_with_the_best(tmp_path: Path) -> None:
    # berkeley-nest/Nectar rows (dataset card; as in tests/test_open_world_data.py): answers ranked, 1 the best.
    row = {
        "prompt": "\n\nHuman: What color is the sky?\n\nAssistant:",
        "answers": [
            {"answer": "It is green.", "model": "a", "rank": 2.0},
            {"answer": "It is blue.", "model": "b", "rank": 1.0},
            {"answer": "Purple.", "model": "c", "rank": 3.0},
        ],
    }
    code, rows, _ = _convert(tmp_path, "nectar.jsonl", [row], "dpo")
    assert code == 0
    assert sorted((r["chosen"], r["rejected"]) for r in rows) == [
        ("It is blue.<|im_end|>", "It is green.<|im_end|>"),
        ("It is blue.<|im_end|>", "Purple.<|im_end|>"),
    ]
    assert {r["paired_by"] for r in rows} == {"judgement"} and len({r["prompt"] for r in rows}) == 1


def test_scored_siblings_without_a_judgement_pair_the_best_with_the_worst(tmp_path: Path) -> None:
    records = [rollout(5, a, r, tool=False) for a, r in enumerate([0.5, 1.0, 0.0])] + [rollout(6, 0, 1.0, tool=False)]
    code, rows, out = _convert(tmp_path, "results.jsonl", records, "dpo")
    assert code == 0 and len(rows) == 1
    (pair,) = rows
    assert (pair["chosen_reward"], pair["rejected_reward"], pair["paired_by"]) == (1.0, 0.0, "reward")
    assert pair["chosen"].startswith("attempt 1") and pair["rejected"].startswith("attempt 2")
    assert (
        json.loads((out / "report.json").read_text())["outputs"]["preference"]["scored_prompts_without_a_margin"] == 1
    )


def test_text_that_would_tokenize_into_other_ids_is_not_written() -> None:
    tok = load_named_tokenizer("qwen3")
    text = TrlText(tok)
    prompt = tok.encode("<|im_start|>user\nHi<|im_end|>\n<|im_start|>assistant\n").tolist()
    stop = tok.encode("<|im_end|>").tolist()
    canonical = tok.encode("Hello there").tolist() + stop
    assert text.texts(prompt, canonical) == (tok.decode(prompt), "Hello there<|im_end|>")
    split = tok.encode("Hel").tolist() + tok.encode("lo there").tolist() + stop  # an engine's non-canonical ids
    assert split != canonical and text.texts(prompt, split) is None


# --- TRL trains them with its defaults ----------------------------------------------------------------------


def _trl_args(trl: Any, config: str, tmp_path: Path) -> Any:
    return getattr(trl, config)(
        output_dir=str(tmp_path / "trainer"),
        report_to=[],
        per_device_train_batch_size=4,
        max_steps=1,
        use_cpu=True,
        save_strategy="no",
        logging_strategy="no",
        disable_tqdm=True,
    )


def _saved_tiny_model(vocab: int, tmp_path: Path) -> str:
    """A tiny random model saved to a folder: TRL builds the reference model from the policy's path."""
    path = tmp_path / "tiny-model"
    tiny_llama(vocab).save_pretrained(path)
    return str(path)


def _load(out: Path, tmp_path: Path) -> Any:
    import datasets

    return datasets.load_dataset(
        "parquet", data_files=str(out / "data" / "train-*.parquet"), split="train", cache_dir=str(tmp_path / "cache")
    )


@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_trl_dpo_trainer_trains_the_written_pairs_token_exactly_with_its_defaults(tmp_path: Path) -> None:
    trl = pytest.importorskip("trl", reason="TRL not installed (pip install 'msgtrain[trainers]')")
    code, rows, out = _convert(tmp_path, "pairs.jsonl", PAIRS, "dpo")
    assert code == 0
    hf = load_named_tokenizer("demo").hf
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        trainer = trl.DPOTrainer(
            model=_saved_tiny_model(len(hf), tmp_path),
            args=_trl_args(trl, "DPOConfig", tmp_path),
            train_dataset=_load(out, tmp_path),
            processing_class=hf,
        )
    model = trainer.model
    prepared = trainer.train_dataset.to_list()
    for got, row in zip(prepared, rows, strict=True):  # TRL's own tokenization is the logged ids
        assert (got["prompt_ids"], got["chosen_ids"], got["rejected_ids"]) == (
            row["prompt_ids"],
            row["chosen_ids"],
            row["rejected_ids"],
        )
    before = [p.detach().clone() for p in model.parameters()]
    trainer.train()
    assert any(not a.equal(p.detach()) for a, p in zip(before, model.parameters(), strict=True))


@pytest.mark.filterwarnings("ignore::FutureWarning")
def test_trl_kto_trainer_trains_the_labelled_replies_with_its_defaults(tmp_path: Path) -> None:
    trl = pytest.importorskip("trl", reason="TRL not installed (pip install 'msgtrain[trainers]')")
    code, rows, out = _convert(tmp_path, "kto.json", LABELLED, "kto")
    assert code == 0
    hf = load_named_tokenizer("demo").hf
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", UserWarning)
        trainer = trl.KTOTrainer(
            model=_saved_tiny_model(len(hf), tmp_path),
            args=_trl_args(trl, "KTOConfig", tmp_path),
            train_dataset=_load(out, tmp_path),
            processing_class=hf,
        )
    model = trainer.model
    prepared = trainer.train_dataset.to_list()
    assert [(g["prompt_ids"], g["completion_ids"], g["label"]) for g in prepared] == [
        (r["prompt_ids"], r["completion_ids"], r["label"]) for r in rows
    ]
    assert all("KL_completion_ids" in g for g in prepared)  # TRL builds its KL column itself
    before = [p.detach().clone() for p in model.parameters()]
    trainer.train()
    assert any(not a.equal(p.detach()) for a, p in zip(before, model.parameters(), strict=True))


def test_dataset_tools_say_what_to_do_with_preference_rows(tmp_path: Path) -> None:
    code, _, out = _convert(tmp_path, "pairs.jsonl", PAIRS, "dpo")
    assert code == 0
    from msgtrain.errors import ConfigError
    from msgtrain.tools.dataset import data_files, target_of

    for command in ("stats", "inspect"):
        assert main([command, str(out)]) != 0
    with pytest.raises(ConfigError, match="--target canonical --train-negative") as raised:
        target_of(data_files(out)[0].names)
    assert raised.value.code == "preference_dataset"

"""The README's quick start, followed as a new user follows it: the default output handed to TRL's ``SFTTrainer``
with its default settings trains exactly the ``loss_mask`` tokens."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from msgtrain.cli import main
from tests.conftest import SAMPLE_LOGS, tiny_llama

# TRL 1.16's SFTConfig still sets `gradient_checkpointing`, which transformers 5 deprecates: not ours to fix.
TRL_WARNINGS = pytest.mark.filterwarnings("ignore:`gradient_checkpointing` is deprecated:FutureWarning")


@pytest.fixture(scope="module")
def quick_start(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A folder holding ``out/demo`` as ``msgtrain convert sample_logs -o out/demo`` writes it."""
    root = tmp_path_factory.mktemp("quick-start")
    assert main(["convert", str(SAMPLE_LOGS), "-o", str(root / "out" / "demo"), "-q"]) == 0
    return root


@TRL_WARNINGS
def test_sft_trainer_with_its_defaults_trains_exactly_the_loss_mask_of_the_quick_start_output(
    quick_start: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trl = pytest.importorskip("trl", reason="TRL not installed (pip install 'msgtrain[trainers]')")
    from datasets import load_dataset

    from msgtrain.linearize import load_tokenizer

    monkeypatch.chdir(quick_start)
    train = load_dataset("out/demo")["train"]
    tokenizer = load_tokenizer(None).hf
    # Only what a run needs besides the settings that decide labels: where to write, CPU, one step.
    args = trl.SFTConfig(output_dir=str(quick_start / "ckpt"), use_cpu=True, max_steps=1, report_to=[])
    trainer = trl.SFTTrainer(
        model=tiny_llama(len(tokenizer), 4096), args=args, train_dataset=train, processing_class=tokenizer
    )

    limit = args.max_length  # TRL's default (1024) truncates longer rows; README says to pass max_length=None
    by_id = {row["sample_id"]: row for row in train}
    prepared = trainer.train_dataset
    kept = set(prepared["sample_id"])
    # Every row whose trained tokens all fit TRL's default length is trained, and none is dropped silently.
    assert {s for s, row in by_id.items() if 1 in row["loss_mask"][:limit]} == kept
    expected_trained = 0
    for row in prepared:
        source = by_id[row["sample_id"]]
        ids = np.asarray(source["input_ids"][:limit])
        mask = np.asarray(source["loss_mask"][:limit])
        assert row["labels"] == np.where(mask == 1, ids, -100).tolist(), row["sample_id"]
        expected_trained += int(mask.sum())
    assert any(row["num_tokens"] <= limit for row in train)
    # What the trainer's own dataloader collates over one epoch trains exactly those tokens.
    trained = sum(int((batch["labels"] != -100).sum()) for batch in trainer.get_train_dataloader())
    assert trained == expected_trained
    trainer.train()  # one CPU step on a tiny random model: the default output is accepted end to end

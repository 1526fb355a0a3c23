"""Write ``tests/golden/tokenize/modalities_eos/docs.pbin`` with Modalities 0.5.0 itself.

Modalities' ``pack_encoded_data`` tokenizes each line with its HF tokenizer wrapper (the text
as given, not stripped), appends the EOD token when the encoding does not end with it, and
writes documents in line order. ``streamload tokenize --format modalities`` strips texts and
skips empty ones (the ``dolma tokens`` rules), so the two agree byte for byte on lines whose
text has no surrounding whitespace and is not empty; this script keeps those lines of
``docs.jsonl`` that have an id (``modalities_docs.jsonl``), indexes them with Modalities'
``IndexGenerator`` and packs them with its ``PackedDataGenerator`` (the engine of
``pack_encoded_data``). An optional argument names another output folder (the live test).

Modalities must not go into the project venv (it pulls transformers, wandb, …); install it
aside and run this with the system interpreter::

    pip install --target /tmp/modal_env -c constraints/ci.txt modalities==0.5.0
    PYTHONPATH=/tmp/modal_env python3 tests/golden/make_modalities_goldens.py
"""

from __future__ import annotations

import json
import shutil
import tempfile
from pathlib import Path

GOLDEN = Path(__file__).parent / "tokenize"
EOD = "<|endoftext|>"


def modalities_lines() -> list[str]:
    """Lines of ``docs.jsonl`` whose text both tools tokenize the same way."""
    keep = []
    for line in (GOLDEN / "docs.jsonl").read_text(encoding="utf-8").splitlines():
        doc = json.loads(line)
        text = doc.get("text")
        # (and an id, which streamload requires by default and Modalities ignores)
        if isinstance(text, str) and text and text == text.strip() and "id" in doc:
            keep.append(line)
    return keep


def hf_tokenizer_dir(folder: Path) -> Path:
    """A folder ``AutoTokenizer`` loads: the golden ``tokenizer.json`` and a config."""
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copy(GOLDEN / "tokenizer.json", folder / "tokenizer.json")
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": EOD}
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    return folder


def main(out_root: Path = GOLDEN) -> None:
    from modalities.dataloader.create_index import IndexGenerator
    from modalities.dataloader.create_packed_data import PackedDataGenerator
    from modalities.tokenization.tokenizer_wrapper import PreTrainedHFTokenizer

    out_root.mkdir(parents=True, exist_ok=True)
    src = out_root / "modalities_docs.jsonl"
    src.write_text("\n".join(modalities_lines()) + "\n", encoding="utf-8")
    out = out_root / "modalities_eos"
    out.mkdir(parents=True, exist_ok=True)
    (out / "docs.pbin").unlink(missing_ok=True)  # Modalities refuses to overwrite
    with tempfile.TemporaryDirectory() as tmp:
        index = Path(tmp) / "docs.idx"
        IndexGenerator(src).create_index(index)
        tokenizer = PreTrainedHFTokenizer(str(hf_tokenizer_dir(Path(tmp) / "tok")))
        PackedDataGenerator(
            src_path=src,
            tokenizer=tokenizer,
            eod_token=EOD,
            number_of_processes=1,
            jq_pattern=".text",
            processing_batch_size=8,
            raw_samples_queue_size=64,
            processed_samples_queue_size=64,
            index_path=index,
        ).run(out / "docs.pbin")
    print(f"wrote {out / 'docs.pbin'} ({(out / 'docs.pbin').stat().st_size} bytes)")


if __name__ == "__main__":
    import sys

    main(Path(sys.argv[1]) if len(sys.argv) > 1 else GOLDEN)

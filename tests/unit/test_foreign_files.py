"""Files from elsewhere, read without trusting them: strict JSON in linear time within key limits, safetensors
headers checked before the native loader sees the file, a local model directory checked against the recipe, data
files bounded by their parquet footer or line count before their rows are read."""

from __future__ import annotations

import json
import struct
from pathlib import Path

import pytest
import torch
from safetensors.torch import save

from harness import jsonio
from harness.config.recipe import resolve
from harness.core import data as dt
from harness.core import model_builder
from harness.errors import HarnessError
from harness.statefile import SAFETENSORS_HEADER_LIMIT, load_state, safetensors_index, save_state

ROOT = Path(__file__).resolve().parents[2]


# ----------------------------------------------------------------------------- strict JSON
def test_line_numbers_are_computed_only_for_an_error(monkeypatch):
    """The parse is linear: no per-key count of the newlines before it (2,000 keys: 0 line computations)."""
    calls: list[int] = []
    real = jsonio._line_of
    monkeypatch.setattr(jsonio, "_line_of", lambda text, pos: calls.append(pos) or real(text, pos))
    text = "{\n" + ",\n".join(f'"k{i}": {{"a": [{i}, {{"b": null}}]}}' for i in range(2000)) + "\n}"
    assert len(jsonio.loads_strict(text)) == 2000
    assert calls == []
    with pytest.raises(HarnessError, match=r"line 4: duplicate key 'a' \(first defined on line 2\)") as err:
        jsonio.loads_strict('{\n"a": 1,\n"b": 2,\n"a": 3}', "r.json")
    assert len(calls) == 2 and err.value.exit_code == 1 and str(err.value).startswith("r.json::/a: ")


def test_objects_and_documents_have_a_size_limit(tmp_path):
    keys = tmp_path / "keys.json"
    n = jsonio.MAX_OBJECT_KEYS + 1
    keys.write_text('{"name": "x", "extra": {\n' + ",\n".join(f'"k{i}": {i}' for i in range(n)) + "}}")
    with pytest.raises(HarnessError, match=r"line 10002: object has more than 10,000 keys") as err:
        jsonio.load_json_strict(keys)
    assert str(err.value).startswith(f"{keys}::/extra: ") and err.value.exit_code == 2 and "\n" not in str(err.value)
    assert len(jsonio.load_json_strict(keys, max_object_keys=jsonio.TENSOR_INDEX_KEYS)["extra"]) == n
    with pytest.raises(HarnessError, match="more than 100 keys and array items in one document"):
        jsonio.loads_strict("[" + ",".join(["[0]"] * 60) + "]", max_values=100)
    assert len(jsonio.loads_strict("[" + ",".join(["0"] * 100) + "]", max_values=100)) == 100


def test_every_committed_record_is_far_within_the_limits():
    """The limits are far above the largest real record (a baseline: 33 keys in one object, ~30,000 values)."""
    paths = [p for d in ("baselines", "certificates", "recipes", "schemas") for p in (ROOT / d).rglob("*.json")]
    assert len(paths) > 20
    for path in paths:
        jsonio.load_json_strict(path, max_object_keys=jsonio.MAX_OBJECT_KEYS // 100,
                                max_values=jsonio.MAX_VALUES // 100)


# ----------------------------------------------------------------------------- safetensors headers
def _tensors() -> dict[str, torch.Tensor]:
    return {"w": torch.ones(2, 3), "b": torch.zeros(3, dtype=torch.bfloat16), "flag": torch.tensor(True)}


def _forged(header: dict, data_len: int, header_len: int | None = None) -> bytes:
    raw = json.dumps(header).encode()
    return struct.pack("<Q", len(raw) if header_len is None else header_len) + raw + bytes(data_len)


def test_a_saved_file_is_indexed_from_its_header_alone(tmp_path):
    index, meta = safetensors_index(save(_tensors(), metadata={"k": "v"}), fix="-")
    assert meta == {"k": "v"} and index["w"].shape == (2, 3) and index["b"].dtype == "BF16"
    assert index["w"].end - index["w"].begin == 24 and index["flag"].shape == ()
    path = tmp_path / "m.safetensors"
    path.write_bytes(save(_tensors()))
    assert safetensors_index(path, fix="-")[0] == index


F32 = {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}


@pytest.mark.parametrize("raw,message", [
    (b"", "of 0 bytes is shorter than the 8-byte"),
    (struct.pack("<Q", 2 ** 62) + b"{}", f"header length 4,611,686,018,427,387,904 bytes, over the limit of "
                                         f"{SAFETENSORS_HEADER_LIMIT:,}"),
    (struct.pack("<Q", 1000) + b"{}", "header length 1,000 bytes runs past the end of the file"),
    (_forged({"w": {**F32, "data_offsets": [0, 2 ** 40]}}, 8), r"data_offsets \[0, 1099511627776\] run past the end"),
    (_forged({"w": {**F32, "shape": [2 ** 20, 2 ** 20]}}, 8), "is 4,398,046,511,104 bytes but data_offsets"),
    (_forged({"w": F32, "v": F32}, 8), "tensors are not back to back"),
    (_forged({"w": F32}, 16), "the tensors cover 8 of the 16 data bytes"),
    (_forged({"w": {**F32, "dtype": "OBJ"}}, 8), "dtype 'OBJ' is not one the harness reads"),
    (_forged({"w": {**F32, "shape": [-2]}}, 8), "shape must be a list of at most 64 non-negative integers"),
    (_forged({"w": {**F32, "shape": [2] * 100_000}}, 8), "shape must be a list of at most 64"),
    (_forged({"w": {**F32, "extra": 1}}, 8), "needs exactly dtype, shape and data_offsets"),
    (_forged({"__metadata__": {"a": 1}}, 0), "__metadata__ must map strings to strings"),
    (_forged([1, 2], 0), "not a JSON object"),
    (struct.pack("<Q", 20) + b'{"a": 1, "a": 2}    ', "duplicate key 'a'"),
    (struct.pack("<Q", 2) + b"\xff\xfe", "not UTF-8"),
])
def test_hostile_safetensors_headers_are_refused_in_one_line(tmp_path, raw, message):
    path = tmp_path / "bad.safetensors"
    path.write_bytes(raw)
    for source in (raw, path):
        with pytest.raises(HarnessError, match=message) as err:
            safetensors_index(source, what="model weights", fix="save it again", name=str(path))
        assert err.value.exit_code == 2 and "\n" not in str(err.value) and str(err.value).startswith(str(path))


def test_a_checkpoint_with_a_forged_header_never_reaches_the_native_loader(tmp_path, monkeypatch):
    save_state({"w": torch.ones(2)}, tmp_path / "state")
    st = tmp_path / "state.safetensors"
    data = bytearray(st.read_bytes())
    data[:8] = struct.pack("<Q", 2 ** 62)
    st.write_bytes(bytes(data))
    import safetensors

    monkeypatch.setattr(safetensors, "safe_open", lambda *a, **k: pytest.fail("the native loader was reached"))
    with pytest.raises(HarnessError, match="corrupt training state: header length") as err:
        load_state(tmp_path / "state")
    assert "resume from another checkpoint" in str(err.value)


# ----------------------------------------------------------------------------- a local model directory
@pytest.fixture(scope="module")
def spec():
    return resolve("qwen3_1_7b", "cpu", "smoke").spec


def _model_dir(tmp_path: Path, spec, weights: bytes = b"", **config) -> Path:
    d = tmp_path / "m"
    d.mkdir()
    text = spec.model.architecture.text
    doc = {"model_type": "qwen3", **{f: getattr(text, f) for f in model_builder.TEXT_FIELDS}, **config}
    (d / "config.json").write_text(json.dumps(doc))
    (d / "model.safetensors").write_bytes(weights)
    return d


def _build(spec, path: Path):
    cfg = spec.model_copy(update={"model": spec.model.model_copy(update={"path": str(path)})})
    return model_builder.build_models(cfg, {"pad": 0, "eos": 1, "image_pad": 2, "video_pad": 3, "vision_start": 4,
                                     "vision_end": 5}, torch.device("cpu"), 0, with_ref=False)


def _never_loaded(monkeypatch):
    import transformers

    monkeypatch.setattr(transformers.Qwen3ForCausalLM, "from_pretrained",
                        classmethod(lambda *a, **k: pytest.fail("weights were loaded")))


def test_a_model_directory_of_another_architecture_is_refused_before_anything_is_built(tmp_path, spec, monkeypatch):
    """config.json of a 68 GB model where the recipe (and its memory pre-flight) describe a small one."""
    _never_loaded(monkeypatch)
    huge = _model_dir(tmp_path, spec, hidden_size=65536, vocab_size=10 ** 6, num_hidden_layers=200)
    with pytest.raises(HarnessError) as err:
        _build(spec, huge)
    assert str(err.value).startswith(f"{huge / 'config.json'}::/hidden_size: hidden_size 65536 but the recipe's "
                                     "model.architecture.text.hidden_size is 128")
    (huge / "config.json").write_text(json.dumps({**json.loads((huge / "config.json").read_text()),
                                                  "hidden_size": 128, "model_type": "llama"}))
    with pytest.raises(HarnessError, match="model_type 'llama' but the recipe's model.family is 'qwen3'"):
        _build(spec, huge)


def test_forged_weights_in_a_model_directory_are_one_line(tmp_path, spec, monkeypatch):
    d = _model_dir(tmp_path, spec, weights=struct.pack("<Q", 2 ** 62) + b"{}")
    _never_loaded(monkeypatch)
    with pytest.raises(HarnessError, match="model weights: header length 4,611,686,018,427,387,904 bytes") as err:
        _build(spec, d)
    assert "save_pretrained(safe_serialization=True)" in str(err.value)
    (d / "model.safetensors").write_bytes(save({"model.norm.weight": torch.ones(3)}))
    from safetensors import SafetensorError

    def refuse(*a, **k):
        raise SafetensorError("Error while deserializing header: HeaderTooLarge\nmore")

    import transformers

    monkeypatch.setattr(transformers.Qwen3ForCausalLM, "from_pretrained", classmethod(refuse))
    with pytest.raises(HarnessError, match=r"cannot load weights \(SafetensorError: Error while deserializing") as err:
        _build(spec, d)
    assert "\n" not in str(err.value)


# ----------------------------------------------------------------------------- data files
def _no_rows_read(monkeypatch):
    import pyarrow.parquet as pq

    monkeypatch.setattr(pq.ParquetFile, "iter_batches", lambda *a, **k: pytest.fail("rows were read"))
    monkeypatch.setattr(pq, "read_table", lambda *a, **k: pytest.fail("rows were read"))


def _parquet(path: Path, rows: int, columns: int = 2, row_group_size: int | None = None) -> Path:
    import pyarrow as pa
    import pyarrow.parquet as pq

    table = pa.table({f"c{j}": pa.array(["What is 1+1?"] * rows) for j in range(columns - 1)}
                     | {"answer": pa.array(["2"] * rows)})
    pq.write_table(table, path, compression="zstd", row_group_size=row_group_size)
    return path


@pytest.mark.parametrize("limit,value,message", [
    ("MAX_ROWS", 1000, "parquet file has 2,000 rows, over the limit of 1,000"),
    ("MAX_COLUMNS", 3, "parquet file has 4 columns, over the limit of 3"),
    ("MAX_ROW_GROUPS", 3, "parquet file has 4 row groups, over the limit of 3"),
    ("MAX_DECODED", 1000, "parquet file decodes to [0-9,]+ bytes, over the limit of 1,000"),
])
def test_parquet_limits_come_from_the_footer_before_any_row(tmp_path, monkeypatch, limit, value, message):
    path = _parquet(tmp_path / "d.parquet", 2000, columns=4, row_group_size=500)
    monkeypatch.setattr(dt, limit, value)
    _no_rows_read(monkeypatch)
    with pytest.raises(HarnessError, match=message) as err:
        dt.load_local(path)
    assert err.value.exit_code == 2 and str(err.value).startswith(str(path))


def test_parquet_within_the_limits_is_read_in_batches(tmp_path):
    path = _parquet(tmp_path / "d.parquet", 2500, columns=2)
    rows = dt._read_rows(path)
    assert len(rows) == 2500 and rows[-1] == {"c0": "What is 1+1?", "answer": "2"}


def test_jsonl_line_count_is_bounded_before_parsing(tmp_path, monkeypatch):
    path = tmp_path / "d.jsonl"
    path.write_text(json.dumps({"problem": "1+1?", "answer": "2"}) + "\n" * 11)
    monkeypatch.setattr(dt, "MAX_ROWS", 10)
    monkeypatch.setattr(dt.json, "loads", lambda *a, **k: pytest.fail("a line was parsed"))
    with pytest.raises(HarnessError, match="jsonl file has 11 lines, over the limit of 10"):
        dt.load_local(path)
    path.write_text(json.dumps({"problem": "1+1?", "answer": "2"}) + "\n" * 10)
    monkeypatch.undo()
    monkeypatch.setattr(dt, "MAX_ROWS", 10)
    assert len(dt.load_local(path)) == 1

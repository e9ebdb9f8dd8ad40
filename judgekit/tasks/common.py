"""Helpers shared by the task plug-ins: local data files, hub loading, prompts, code blocks and numbers."""

from __future__ import annotations

import gzip
import json
import re
import zlib
from decimal import Decimal, InvalidOperation
from pathlib import Path
from typing import Any, Iterable

from judgekit.errors import JudgekitError

# --------------------------------------------------------------------------- data files


def read_records(path: str | Path) -> list[dict[str, Any]]:
    """Rows of a local data file: JSONL (optionally .gz), a JSON list, or Parquet.

    Whatever is wrong with the file (missing, a directory, not the format its name says, not UTF-8, a bad
    line, a row that is not an object) is one JudgekitError naming the file and, where it applies, the row.
    """
    p = Path(path)
    if p.is_dir():
        raise JudgekitError(f"data file {str(p)!r} is a directory, not a JSONL/JSON/Parquet file")
    if not p.is_file():
        raise JudgekitError(f"data file {str(p)!r} does not exist")
    name = p.name.lower()
    if name.endswith(".parquet"):
        import pyarrow as pa
        import pyarrow.parquet as pq

        try:
            rows = pq.read_table(p).to_pylist()
        except (pa.ArrowException, OSError) as err:
            raise JudgekitError(f"{p}: not a readable Parquet file ({type(err).__name__}: {err})") from None
    else:
        text = _read_text(p, gzipped=name.endswith(".gz"))
        if name.endswith((".json", ".json.gz")) and text.lstrip().startswith("["):
            try:
                rows = json.loads(text)
            except json.JSONDecodeError as err:
                raise JudgekitError(f"{p}: not a JSON list ({err.msg} at line {err.lineno})") from None
            if not isinstance(rows, list):
                raise JudgekitError(f"{p}: expected a JSON list of objects")
        else:
            rows = []
            for lineno, line in enumerate(text.splitlines(), 1):
                if not line.strip():
                    continue
                try:
                    rows.append(json.loads(line))
                except json.JSONDecodeError as err:
                    raise JudgekitError(f"{p}:{lineno}: not a JSON line ({err.msg})") from None
    for i, r in enumerate(rows):
        if not isinstance(r, dict):
            raise JudgekitError(f"{p}: row {i + 1} is a {type(r).__name__}, not a JSON object")
    return rows


def _read_text(p: Path, gzipped: bool) -> str:
    try:
        if gzipped:
            with gzip.open(p, "rb") as f:
                data = f.read()
        else:
            data = p.read_bytes()
    except (OSError, EOFError, zlib.error) as err:  # BadGzipFile is an OSError
        kind = "gzip " if gzipped else ""
        raise JudgekitError(f"{p}: not a readable {kind}file ({type(err).__name__}: {err})") from None
    if data[:2] == b"\x1f\x8b":
        raise JudgekitError(f"{p}: the file is gzip-compressed; name it *.gz")
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as err:
        raise JudgekitError(f"{p}: not UTF-8 text (byte {err.start}); expected JSONL, JSON or Parquet") from None


def require_fields(rows: list[dict[str, Any]], fields: Iterable[str], path: str) -> None:
    """Fail with one clear line when a local file is not in the task's official layout."""
    fields = list(fields)
    for i, row in enumerate(rows):
        missing = [f for f in fields if f not in row]
        if missing:
            raise JudgekitError(f"{path}: row {i + 1} lacks field(s) {', '.join(missing)}; "
                                f"expected {', '.join(fields)}")


def text_field(row: dict[str, Any], key: str, where: str, numbers: bool = False) -> str:
    """A row's field as a non-empty string (`numbers=True` also accepts an int/float and writes it out):
    a null, a number or an empty value is an error naming the row instead of a silent "None" in a prompt."""
    value = row.get(key)
    if numbers and isinstance(value, (int, float)) and not isinstance(value, bool):
        return str(value)
    if not isinstance(value, str) or not value.strip():
        shown = "missing" if key not in row else f"{type(value).__name__} {value!r}"[:80]
        kind = "a non-empty string or a number" if numbers else "a non-empty string"
        raise JudgekitError(f"{where}: field {key!r} must be {kind}, got {shown}")
    return value


def load_hub(hub_id: str, config: str | None, split: str) -> list[dict[str, Any]]:
    """Rows of a hub data set via `datasets`; any failure (offline, missing) becomes a one-line user error."""
    try:
        from datasets import load_dataset

        ds = load_dataset(hub_id, config, split=split) if config else load_dataset(hub_id, split=split)
        return [dict(r) for r in ds]
    except Exception as err:  # noqa: BLE001 - offline hubs fail in many ways; all mean the same to the user
        raise JudgekitError(
            f"cannot load {hub_id}{'/' + config if config else ''} split {split!r} from the hub "
            f"({type(err).__name__}); pass --data-file with a local JSONL/Parquet copy"
        ) from None


def apply_limit(rows: list[Any], limit: int | None) -> list[Any]:
    if limit is not None and limit < 0:
        raise JudgekitError("--limit must be non-negative")
    return rows if limit is None else rows[:limit]


def check_split(task: str, split: str, splits: tuple[str, ...], data_file: str | None) -> None:
    """A split name is checked only against the default source; a local file is whatever the user gives."""
    if data_file is None and split not in splits:
        raise JudgekitError(f"task {task} has no split {split!r}; choose from {', '.join(splits)}")


# --------------------------------------------------------------------------- prompts


def has_chat_template(tokenizer: Any) -> bool:
    return tokenizer is not None and bool(getattr(tokenizer, "chat_template", None))


def render_prompt(user_text: str, tokenizer: Any = None, chat_template: bool = True,
                  completion_prefix: str = "", shots: Iterable[tuple[str, str]] = (),
                  plain: str | None = None, system: str | None = None) -> str:
    """The model input: judgekit's one chat-template renderer.

    With a tokenizer that has a chat template (and `chat_template`), a `system` text becomes the first
    (system) turn, the few-shot `shots` alternating user/assistant turns before the user turn `user_text`,
    and the template's generation prompt follows; otherwise the text is `plain` (a task's own plain-text
    layout, which then has to include any system text itself) or `user_text`. `completion_prefix` is appended
    in both cases to steer the format.
    """
    if chat_template and has_chat_template(tokenizer):
        messages: list[dict[str, str]] = [{"role": "system", "content": system}] if system is not None else []
        for q, a in shots:
            messages += [{"role": "user", "content": q}, {"role": "assistant", "content": a}]
        messages.append({"role": "user", "content": user_text})
        return tokenizer.apply_chat_template(messages, tokenize=False, add_generation_prompt=True) + completion_prefix
    return (user_text if plain is None else plain) + completion_prefix


# --------------------------------------------------------------------------- code blocks

_FENCE_RE = re.compile(r"```[ \t]*([\w+#.-]*)[^\n]*\n(.*?)(?:```|\Z)", re.S)


def last_code_block(text: str) -> str | None:
    """The contents of the last fenced ``` block (an unclosed last block counts); None when there is none.

    Models usually put the final program last, after drafts and explanations, so the last block is graded.
    """
    blocks = [m.group(2) for m in _FENCE_RE.finditer(text)]
    if not blocks:
        return None
    return blocks[-1].rstrip() + "\n"


def code_fence_closed(text: str) -> bool:
    """True once a closing ``` follows an opening one (the code to be graded can no longer change)."""
    first = text.find("```")
    if first < 0:
        return False
    newline = text.find("\n", first)
    return newline >= 0 and text.find("```", newline) >= 0


def extract_code(text: str) -> str:
    """The program in a completion: the last fenced block, or the whole text when no fence is present."""
    block = last_code_block(text)
    return block if block is not None else text


# --------------------------------------------------------------------------- numbers

# A sign only when it is not a hyphen between words/numbers ("3-4", "x-2"); commas only as thousands groups.
_NUM_RE = re.compile(r"(?:(?<![\w)])-)?(?:\d{1,3}(?:,\d{3})+|\d+)(?:\.\d+)?|(?:(?<![\w)])-)?\.\d+")


NUMBER_RE = _NUM_RE


def normalize_number(text: str | None) -> str | None:
    """A canonical string for a numeric answer: '$1,234.50' -> '1234.5', '72.0' -> '72', '-3.' -> '-3'.

    Returns None when the text holds no number. Non-numeric text is compared as stripped lowercase.
    """
    if text is None:
        return None
    s = str(text).strip()
    s = s.replace("$", "").replace(",", "").replace("\u2212", "-").strip()
    s = s.rstrip(".").strip()
    s = s.rstrip("%").strip()
    if not s:
        return None
    try:
        value = Decimal(s)
    except InvalidOperation:
        m = _NUM_RE.search(s)
        if not m:
            return None
        try:
            value = Decimal(m.group(0).replace(",", ""))
        except InvalidOperation:
            return None
    if not value.is_finite():
        return None
    if value == value.to_integral_value():
        return str(int(value))
    return format(value.normalize(), "f")


def last_number(text: str) -> str | None:
    """The last number written in `text` (GSM8K's fallback when no answer marker is present)."""
    matches = _NUM_RE.findall(text)
    for m in reversed(matches):
        norm = normalize_number(m)
        if norm is not None:
            return norm
    return None


# --------------------------------------------------------------------------- values out of a sandbox

# Source of `_jk_enc`, pasted into sandboxed harness programs: a returned value as JSON with tags for what
# JSON cannot carry (tuples, sets, non-string dict keys, complex, inf/nan, bytes), so the trusted process can
# rebuild it exactly (`decode_value`) and compare it there, not inside the sandbox where the code under test
# could interfere with the comparison.
VALUE_ENCODER = '''import math as _jk_math
def _jk_enc(v):
    if v is None or isinstance(v, (bool, int, str)):
        return v
    if isinstance(v, float):
        return v if _jk_math.isfinite(v) else {"f": str(v)}
    if isinstance(v, complex):
        return {"c": [v.real, v.imag]}
    if isinstance(v, list):
        return [_jk_enc(x) for x in v]
    if isinstance(v, tuple):
        return {"t": [_jk_enc(x) for x in v]}
    if isinstance(v, frozenset):
        return {"fs": [_jk_enc(x) for x in v]}
    if isinstance(v, set):
        return {"s": [_jk_enc(x) for x in v]}
    if isinstance(v, dict):
        return {"d": [[_jk_enc(k), _jk_enc(x)] for k, x in v.items()]}
    if isinstance(v, bytes):
        return {"b": v.hex()}
    return {"r": repr(v)[:1000]}
'''


def _compile_encoder() -> Any:
    namespace: dict[str, Any] = {}
    exec(compile(VALUE_ENCODER, "<judgekit VALUE_ENCODER>", "exec"), namespace)  # our own source, not data
    return namespace["_jk_enc"]


# The same encoder in the trusted process (for outcomes holding tuples, complex numbers, ...): one
# implementation, so a value tagged here and one tagged inside a sandbox read back alike with `decode_value`.
encode_value = _compile_encoder()


class Opaque:
    """A returned value JSON cannot carry (e.g. an object); equal only to another with the same repr."""

    def __init__(self, text: str) -> None:
        self.text = text

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Opaque) and other.text == self.text

    def __hash__(self) -> int:
        return hash(self.text)

    def __repr__(self) -> str:
        return f"Opaque({self.text!r})"


def decode_value(obj: Any) -> Any:
    """Inverse of the harness's `_jk_enc`: tagged JSON -> tuples, sets, dicts, complex numbers."""
    if isinstance(obj, list):
        return [decode_value(v) for v in obj]
    if isinstance(obj, dict):
        (tag, val), = obj.items()
        if tag == "t":
            return tuple(decode_value(v) for v in val)
        if tag == "s":
            return {decode_value(v) for v in val}
        if tag == "fs":
            return frozenset(decode_value(v) for v in val)
        if tag == "d":
            return {decode_value(k): decode_value(v) for k, v in val}
        if tag == "c":
            return complex(val[0], val[1])
        if tag == "f":
            return float(val)
        if tag == "b":
            return bytes.fromhex(val)
        return Opaque(str(val))
    return obj

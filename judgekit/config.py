"""Settings of judgekit's stages, declared once for the command line and the config files (TOML / YAML).

A :class:`Setting` is one key: its type, allowed values and help. `judgekit eval` declares its flags from
these (judgekit/commands/_args.py) and checks a config file's keys against the same declarations, so a file
is refused exactly where the flag would be, with the key's name: an unknown key, a wrong type (``seeds =
["abc"]``, a table where a number belongs) or a value out of range is one JudgekitError. `mine` and `train`
read a config file through :func:`apply_config`, which checks it against their argparse declarations.
Torch-free: `judgekit --help` builds every parser from this module.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Iterable

from judgekit.decode.params import in_interval
from judgekit.errors import JudgekitError

DTYPE_CHOICES = ("auto", "bf16", "fp16", "fp32")


@dataclass(frozen=True)
class Kind:
    """A value type: what a file may hold (``types``) and how a command-line word becomes one (``parse``)."""

    name: str
    types: tuple[type, ...]
    parse: Callable[[str], Any]

    def accepts(self, value: Any) -> bool:
        # TOML/YAML booleans are ints to Python: a flag that takes a number does not take true/false.
        if isinstance(value, bool):
            return bool in self.types
        return isinstance(value, self.types)

    def convert(self, value: Any) -> Any:
        """A file's integer where a number belongs is that number as a float (as the flag would parse it)."""
        if float in self.types and isinstance(value, int) and not isinstance(value, bool):
            return float(value)
        return value


def _threshold_word(text: str) -> float | str:
    try:
        return float(text)
    except ValueError:
        return text


INT = Kind("an integer", (int,), int)
FLOAT = Kind("a number", (int, float), float)
STR = Kind("a string", (str,), str)
BOOL = Kind("true or false", (bool,), bool)
THRESHOLD = Kind("a number or a saved threshold name", (int, float, str), _threshold_word)


@dataclass(frozen=True)
class Setting:
    """One key of a stage's settings (config key with underscores; the flag is --key with dashes)."""

    key: str
    kind: Kind
    help: str = ""
    many: bool = False  # a list (one value in a file is a list of one); a comma list on the command line
    interval: str | None = None  # e.g. "[1, inf)"
    choices: tuple | None = None
    aliases: tuple[str, ...] = ()  # other spellings a file may use ("rules" for "rule")
    default: Any = None  # the value when neither the line nor a file gives one

    @property
    def flag(self) -> str:
        return "--" + self.key.replace("_", "-")

    def _wanted(self) -> str:
        if self.choices is not None:
            return "one of " + ", ".join(map(str, self.choices))
        return self.kind.name + (f" in {self.interval}" if self.interval else "")

    def check(self, value: Any, name: str) -> Any:
        """The value in canonical form (a list when ``many``), or a JudgekitError naming it as ``name``."""
        if self.many:
            items = value if isinstance(value, list) else [value]
            if not items:
                raise JudgekitError(f"{name} must hold at least one value")
            return [self._one(v, name) for v in items]
        return self._one(value, name)

    def _one(self, value: Any, name: str) -> Any:
        if not self.kind.accepts(value):
            raise JudgekitError(f"{name} must be {self._wanted()}, got {value!r}")
        value = self.kind.convert(value)
        if self.choices is not None and value not in self.choices:
            raise JudgekitError(f"{name} must be {self._wanted()}, got {value!r}")
        if self.interval is not None and not isinstance(value, str) and not in_interval(value, self.interval):
            raise JudgekitError(f"{name} must be {self._wanted()}, got {value!r}")
        return value


def read_config(path: str | Path) -> dict[str, Any]:
    """A TOML (.toml) or YAML (.yaml/.yml) file -> its top-level table, unvalidated."""
    path = Path(path)
    if not path.is_file():
        raise JudgekitError(f"config file {path} does not exist")
    try:
        if path.suffix == ".toml":
            import tomllib

            data = tomllib.loads(path.read_text())
        elif path.suffix in (".yaml", ".yml"):
            import yaml

            data = yaml.safe_load(path.read_text()) or {}
        else:
            raise JudgekitError(f"config {path}: use a .toml or .yaml file")
    except JudgekitError:
        raise
    except Exception as err:  # noqa: BLE001 - tomllib and PyYAML raise their own error types
        raise JudgekitError(f"cannot parse config {path}: {err}") from None
    if not isinstance(data, dict):
        raise JudgekitError(f"config {path}: expected a table of settings at the top level")
    return data


def check_table(data: dict, settings: Iterable[Setting], where: str,
                tables: dict[str, Callable[[Any, str], Any]] | None = None) -> dict[str, Any]:
    """A file's table -> {canonical key: checked value}. ``tables``: keys holding nested tables (a sweep),
    each checked by its own function. Unknown keys are refused with the allowed ones listed."""
    by_name: dict[str, Setting] = {}
    for s in settings:
        by_name[s.key] = s
        for alias in s.aliases:
            by_name[alias] = s
    tables = tables or {}
    out: dict[str, Any] = {}
    for raw, value in data.items():
        key = str(raw).replace("-", "_")
        if key in tables:
            out[key] = tables[key](value, f"{where}: {key}")
            continue
        if key not in by_name:
            allowed = sorted({s.key for s in by_name.values()} | set(tables))
            raise JudgekitError(f"{where}: unknown setting {raw!r} (allowed: {', '.join(allowed)})")
        s = by_name[key]
        if s.key in out:
            raise JudgekitError(f"{where}: setting {s.key!r} is given twice (as {raw!r} too)")
        out[s.key] = s.check(value, f"{where}: setting {s.key!r}")
    return out


def check_given(values: dict[str, Any], settings: Iterable[Setting]) -> dict[str, Any]:
    """Command-line values (argparse already parsed their type) checked like a file's, named by flag."""
    by_key = {s.key: s for s in settings}
    return {k: by_key[k].check(v, by_key[k].flag) if k in by_key else v for k, v in values.items()}


def check_positions(pair, max_new_tokens: int, prompt_tokens: int = 0) -> None:
    """Refuse a prompt + token budget the models cannot hold (their config's max_position_embeddings)."""
    limits = [getattr(m.config, "max_position_embeddings", None) for m in (pair.target, pair.draft)]
    limits = [n for n in limits if isinstance(n, int)]
    if limits and prompt_tokens + max_new_tokens >= min(limits):
        prompt = f"a {prompt_tokens}-token prompt + " if prompt_tokens else ""
        raise JudgekitError(f"--max-new-tokens {max_new_tokens} does not fit: {prompt}{max_new_tokens} new tokens "
                            f"run past the models' {min(limits)} positions")


# ------------------------------------------------------------------------------------------------------------
# A config file for a command whose flags are plain argparse declarations (`judgekit mine`, `judgekit train`).


def _action_setting(action: argparse.Action) -> Setting:
    """The Setting an argparse action declares: its type, choices and whether it takes a list."""
    if isinstance(action, (argparse._StoreTrueAction, argparse._StoreFalseAction)):
        return Setting(action.dest, BOOL)
    kind = {int: INT, float: FLOAT}.get(action.type, STR)
    many = action.nargs in ("+", "*") or isinstance(action.nargs, int)
    return Setting(action.dest, kind, many=many, choices=tuple(action.choices) if action.choices else None)


def apply_config(parser: argparse.ArgumentParser, args: argparse.Namespace, path: str | Path,
                 given: set[str] | None = None) -> argparse.Namespace:
    """``args`` with the file's settings filled in where the command line did not set them.

    Keys are the parser's destinations (``max_new_tokens``, ``flush_every``), checked against the flags' types
    and choices. `given`: the destinations the command line named (a flag given with its default value still
    wins over the file); without it, a value equal to the parser's default counts as not given."""
    actions = {a.dest: a for a in parser._actions
               if a.dest not in ("help", "config", argparse.SUPPRESS) and a.option_strings}
    settings = [_action_setting(a) for a in actions.values()]
    values = check_table(read_config(path), settings, f"config {path}")
    for key, value in values.items():
        action = actions[key]
        if (key not in given) if given is not None else getattr(args, key) == action.default:
            setattr(args, key, value)
    return args


# ------------------------------------------------------------------------------------------------------------
# Declarations. Decoding settings are shared by `judgekit generate` (one value each) and `judgekit eval`
# (lists where ``many``); the rule parameters come from judgekit.decode.params.

_POSITIVE = "[1, inf)"
DECODING = (
    Setting("block_size", INT, "draft tokens per step (gamma)", many=True, interval=_POSITIVE, default=8,
            aliases=("block_sizes",)),
    Setting("temperature", FLOAT, "0 = greedy", many=True, interval="[0, inf)", default=0.0,
            aliases=("temperatures",)),
    Setting("top_k", INT, "keep the k most likely tokens", interval=_POSITIVE),
    Setting("top_p", FLOAT, "nucleus sampling mass", interval="(0, 1]"),
    Setting("max_new_tokens", INT, "same default as evaluation and mining (judgekit eval, judgekit mine)",
            interval=_POSITIVE, default=256),
    Setting("chat_template", BOOL, "feed the prompt text as is", default=True),
)
SEED = Setting("seed", INT, "sampling seed", default=0)
SEEDS = Setting("seeds", INT, "sampling seeds (greedy points use the first)", many=True, default=0,
                aliases=("seed",))
TREES = Setting("tree", STR, "draft shapes: chain (a chain of --block-size drafts) or a static tree, per-depth "
                             "branching (2,2,1,1) or eagle; its depth is its block size (docs/design.md §2.1)",
                many=True, default="chain", aliases=("trees",))


def rule_param_settings() -> tuple[Setting, ...]:
    """A sweep key per rule parameter (lists; each rule checks its own range when it is built)."""
    from judgekit.decode.params import flag_params

    kinds = {float: FLOAT, str: STR}
    return tuple(Setting(p.key, THRESHOLD if p.named_values else kinds[p.kind], p.help, many=True,
                         choices=p.choices, default=p.default) for p in flag_params())


def eval_sweep_settings() -> tuple[Setting, ...]:
    """What a `judgekit eval` sweep (a config's top level or one [[sweep]] table) may vary."""
    from judgekit.decode.params import RULE_NAMES

    return (Setting("rule", STR, "verification rules", many=True, choices=RULE_NAMES, aliases=("rules",)),
            Setting("judge", STR, "trained judge directories (rule judge)", many=True, aliases=("judges",)),
            *rule_param_settings(), DECODING[0], DECODING[1], SEEDS, TREES)


# Options of the tasks that have them (bfcl, include); a task without the option refuses it.
TASK_OPTIONS = (
    Setting("subset", STR, "task subset: bfcl category (default parallel_multiple; also simple_python, multiple, "
                           "parallel, live_*) or include base|lite"),
    Setting("language", STR, "include: all (default) or a comma list of languages, e.g. German,Greek"),
    Setting("per_language", INT, "include: first N problems of each language", interval=_POSITIVE),
)


def task_options(values) -> dict:
    """The task options given (a namespace or a settings dict), for `get_task(name, **options)`."""
    get = values.get if isinstance(values, dict) else lambda k: getattr(values, k, None)
    return {s.key: get(s.key) for s in TASK_OPTIONS if get(s.key) is not None}


DEVICE_MAP_CHOICES = ("auto", "balanced", "balanced_low_0", "sequential")  # judgekit.models.DEVICE_MAPS
# How the pair is fetched and placed (judgekit.models.LoadOptions).
LOADING = (
    Setting("revision", STR, "hub branch, tag or commit of the target (hub ids only)"),
    Setting("draft_revision", STR, "hub branch, tag or commit of the draft"),
    Setting("trust_remote_code", BOOL, "run the checkpoints' own modelling code (some hub models need it)",
            default=False),
    Setting("device_map", STR, "shard the target over the visible GPUs (or offload it) with accelerate; the draft "
                               "joins the target's first device. Quantised checkpoints (GPTQ, AWQ, ...) load as "
                               "they are", choices=DEVICE_MAP_CHOICES),
)


def loading_options(values) -> dict:
    """load_model_pair's target_options / draft_options from parsed args or a settings dict."""
    from judgekit.models import LoadOptions

    get = values.get if isinstance(values, dict) else (lambda k: getattr(values, k, None))
    trust = bool(get("trust_remote_code"))
    return {"target_options": LoadOptions(get("revision"), trust, get("device_map")),
            "draft_options": LoadOptions(get("draft_revision"), trust)}


EVAL_RUN = (
    Setting("task", STR, "task name (see `judgekit tasks`); on the command line a comma list runs each task into "
                         "its own directory under --out"),
    *TASK_OPTIONS,
    Setting("target", STR), Setting("draft", STR),
    *LOADING,
    Setting("device", STR, default="auto"), Setting("dtype", STR, choices=DTYPE_CHOICES, default="auto"),
    Setting("split", STR, "split of the task (default test)", default="test"),
    Setting("data_file", STR, "local JSONL/Parquet file of problems instead of the default source"),
    Setting("limit", INT, "first N problems of the split", interval=_POSITIVE),
    *DECODING[2:],
    Setting("out", STR, "evaluation directory (records, summary, plots); a rerun resumes it"),
    Setting("title", STR, "title of the summary and the plots", default=""),
    Setting("flush_every", INT, "records per committed shard (default 16)", interval=_POSITIVE, default=16),
    Setting("threads", INT, "CPU threads for torch", interval=_POSITIVE),
    Setting("batch_size", INT, "problems decoded together, on either backend (default 1); greedy "
                               "records do not depend on it", interval=_POSITIVE, default=1),
    Setting("grade_workers", INT, "threads grading finished problems while decoding goes on (default 4; code "
                                  "tasks run each program in the sandbox)", interval=_POSITIVE, default=4),
)


def load_eval_config(path: str | Path) -> dict[str, Any]:
    """A `judgekit eval` config -> {canonical key: checked value}, sweeps under "sweep" (a list of tables)."""
    sweep_settings = eval_sweep_settings()

    def sweeps(value: Any, where: str) -> list[dict[str, Any]]:
        if not isinstance(value, list) or not all(isinstance(s, dict) for s in value):
            raise JudgekitError(f"{where} must be a list of tables ([[sweep]] in TOML)")
        return [check_table(s, sweep_settings, f"{where} {i + 1}") for i, s in enumerate(value)]

    return check_table(read_config(path), (*EVAL_RUN, *sweep_settings), f"config {path}", {"sweep": sweeps})

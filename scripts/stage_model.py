"""Stage a zoo model's GGUF onto a machine that can only receive small files (the GPU machine).

The device machine receives the working tree plus at most 64 MiB per call, so a real model
travels in pieces: split it here, carry one piece per call into a folder that persists
while the machine stays warm, check what has arrived, and reassemble it there, verified
against the SHA-256 that `rhea.modeling.zoo` records, into the cache location `rhea.modeling.zoo` loads from.

    python scripts/stage_model.py room                        # what travels now, what is left for a piece
    python scripts/stage_model.py split smollm2-135m --out .stage/smollm2-135m   # --piece-mb auto (the room)
    python scripts/stage_model.py status --staged .stage/smollm2-135m
    python scripts/stage_model.py assemble --staged .stage/smollm2-135m            # into the cache
    python scripts/stage_model.py assemble --staged DIR --out /tmp/model.gguf --no-install

`split` writes ``piece-000.bin, piece-001.bin, ...`` and ``manifest.json`` (each piece's size
and SHA-256, and the whole file's size and SHA-256). The whole file's hash comes from the zoo
record (`SplitGGUF.sha256`, e.g. qwen2.5-coder-1.5b); a model shipped as one package
(`PackagedGGUF`, e.g. smollm2-135m) has no recorded hash, so the manifest records the hash of
the installed package's file and says so.

The working tree travels with every call and counts towards the 64 MiB (tracked files and
untracked ones git does not ignore, plus a checkout's own ``shared/``). `room` measures it and
what is left for a piece after the carried extras (``--carry``: the manifest, wheels), less a
1 MiB margin; ``split --piece-mb auto`` (the default) cuts pieces of that size, so a call never
exceeds the limit as the tree grows (it was 23 MiB when this was written, 45 MiB a few sessions
later, which left 18 MiB, not 40, for a piece).

`status` lists each piece as present, missing or corrupt (size or SHA-256 differ) and names
the next piece to send. `assemble` concatenates the pieces (streamed, hashed while written,
renamed into place only when the size and SHA-256 match) and installs the result:

* a split model (`SplitGGUF`): the GGUF goes to ``$RHEA_CACHE/gguf/<file>``, where
  `rhea.modeling.zoo` looks first (no part packages needed), and the first `load_rhea_model(NAME)`
  converts it;
* a packaged model (`PackagedGGUF`): `rhea.modeling.zoo` reads its GGUF only from the installed
  package, so the GGUF goes to ``$RHEA_CACHE/gguf/<file>`` and is converted at once into the
  model cache (``$RHEA_CACHE/models/NAME``, what `load_rhea_model(NAME)` reads); `--convert`
  does the same for a split model. Converting needs transformers and the `gguf` package.

Errors are named (`StagingError` for bad arguments or a missing manifest,
`rhea.errors.CorruptModelFileError` when the pieces or the result do not match) and raised
before anything is written. The command sequence for the GPU machine is in docs/reports/gpu.md.
"""
from __future__ import annotations

import argparse
import dataclasses
import hashlib
import json
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from rhea.modeling import zoo as zoo_mod  # noqa: E402
from rhea.errors import CorruptModelFileError, RheaError  # noqa: E402

MANIFEST = "manifest.json"
#: what one device call may carry, working tree included (device README, Limits)
CALL_LIMIT_BYTES = 64 * 2**20
#: kept free under the limit (a manifest, files the tree gains between the split and the call)
MARGIN_BYTES = 2**20


class StagingError(RheaError, ValueError):
    """Bad `stage_model.py` arguments: unknown folder, no manifest, a piece size out of range."""


def _piece_name(i: int) -> str:
    return f"piece-{i:03d}.bin"


def source_of(name: str, from_file: str | None = None) -> tuple[Path, int | None, str | None, str]:
    """(GGUF path, recorded size or None, recorded SHA-256 or None, what the hash rests on)."""
    zoo = zoo_mod.get_model(name)
    src = zoo.source
    recorded_sha, recorded_size = getattr(src, "sha256", None), getattr(src, "size", None)
    if from_file is not None:
        path = Path(from_file)
        if not path.is_file():
            raise StagingError(f"--from {from_file}: no such file")
    else:
        path = src.gguf_path(name)  # a split model's cached GGUF, assembled from its parts when absent
    if recorded_sha is not None:
        basis = f"rhea.modeling.zoo record of {name!r}"
    else:
        basis = (f"hashed from {path} at split time (rhea.modeling.zoo records no hash for the packaged GGUF of "
                 f"{name!r}; it ships as one package)")
    return path, recorded_size, recorded_sha, basis


def _size(path: Path) -> int:
    if path.is_file():
        return path.stat().st_size
    return sum(f.stat().st_size for f in path.rglob("*") if f.is_file() and not f.is_symlink())


def travelling_bytes(repo: Path) -> int:
    """Bytes of what a device call sends from `repo` on its own: tracked files that exist, untracked
    files git does not ignore, and the checkout's own ``shared/`` folder."""
    def listed(*flags: str) -> list[str]:
        try:
            out = subprocess.run(["git", "-C", str(repo), "ls-files", "-z", *flags], check=True,
                                 capture_output=True).stdout
        except (OSError, subprocess.CalledProcessError) as e:
            raise StagingError(f"{repo}: cannot list the files a device call would send ({e}); run this from the "
                               "repository's checkout") from e
        return [n for n in out.decode("utf-8", "surrogateescape").split("\0") if n]

    names = set(listed()) | set(listed("--others", "--exclude-standard"))
    total = 0
    for name in names:
        f = repo / name
        if f.is_file() and not f.is_symlink() and not name.startswith("shared/"):
            total += f.stat().st_size
    if (repo / "shared").is_dir():
        total += _size(repo / "shared")
    return total


def room(repo: Path, carry: list[Path] = ()) -> dict:
    """What a call from `repo` sends before any piece, and how large a piece may be."""
    tree = travelling_bytes(repo)
    paths = [c if c.is_absolute() else repo / c for c in carry]
    missing = [str(c) for c in paths if not c.exists()]
    if missing:
        raise StagingError(f"--carry {', '.join(missing)}: no such path; name what each call will carry")
    extra = sum(_size(c) for c in paths)
    free = CALL_LIMIT_BYTES - tree - extra - MARGIN_BYTES
    record = repo / ASIDE_DIR / ASIDE_RECORD
    moved = [m["path"] for m in json.loads(record.read_text())["moved"]] if record.is_file() else []
    return {"tree_bytes": tree, "carry_bytes": extra, "margin_bytes": MARGIN_BYTES, "limit_bytes": CALL_LIMIT_BYTES,
            "piece_bytes": max(free, 0), "piece_mib": round(max(free, 0) / 2**20, 2), "aside": moved}


#: tracked paths a staging or training call does not need, and that make up most of the tree (committed results,
#: the embedded model's shipped adapters): `aside` moves them out of what travels
ASIDE_DEFAULT = ("benchmarks/results", "rhea/data/adapters")
#: where `aside` keeps them (inside the checkout, git-ignored, so they neither travel nor leave the machine)
ASIDE_DIR = Path(".stage") / "aside"
ASIDE_RECORD = "moved.json"


def aside(repo: Path, paths: list[str] | tuple[str, ...] = ASIDE_DEFAULT) -> dict:
    """Move `paths` (relative to `repo`) into ``.stage/aside/`` so that device calls do not send them.

    Tracked files that are not on disk do not travel, so this shrinks every call by their size and leaves room
    for larger pieces (`room` after `aside`). While they are aside ``git status`` shows them deleted: do not
    commit then; `back` moves them back (also after a failed or interrupted session: the files never left
    the checkout's folder)."""
    store = repo / ASIDE_DIR
    if (store / ASIDE_RECORD).is_file():
        raise StagingError(f"{store / ASIDE_RECORD} exists: paths are already aside; `back` first")
    check_ignored(repo, store, probe_name="x")
    rels = []
    for p in paths:
        rel = Path(p)
        if rel.is_absolute() or ".." in rel.parts or not (repo / rel).exists():
            raise StagingError(f"{p!r}: not a path inside the checkout ({repo}); name folders or files relative to it")
        rels.append(rel)
    moved = []
    store.mkdir(parents=True, exist_ok=True)
    for rel in rels:
        size = _size(repo / rel)
        (store / rel).parent.mkdir(parents=True, exist_ok=True)
        (repo / rel).rename(store / rel)
        moved.append({"path": rel.as_posix(), "bytes": size})
    record = {"moved": moved, "bytes": sum(m["bytes"] for m in moved),
              "note": "moved out of the working tree by scripts/stage_model.py aside; `back` restores them"}
    (store / ASIDE_RECORD).write_text(json.dumps(record, indent=1))
    return record


def back(repo: Path) -> dict:
    """Move every path `aside` moved back into place; refuses (naming the path) where something is there again."""
    store = repo / ASIDE_DIR
    if not (store / ASIDE_RECORD).is_file():
        raise StagingError(f"nothing is aside: {store / ASIDE_RECORD} does not exist")
    record = json.loads((store / ASIDE_RECORD).read_text())
    clash = [m["path"] for m in record["moved"] if (repo / m["path"]).exists()]
    if clash:
        raise StagingError(f"{', '.join(clash)} exist(s) again in the checkout; move them away or merge by hand, "
                           f"the originals are in {store}")
    for m in record["moved"]:
        (repo / m["path"]).parent.mkdir(parents=True, exist_ok=True)
        (store / m["path"]).rename(repo / m["path"])
    (store / ASIDE_RECORD).unlink()
    return record


def check_ignored(repo: Path, out: Path, probe_name: str = "piece-000.bin") -> None:
    """Pieces written inside the checkout must be git-ignored, or every call would send all of them."""
    out = out.resolve()
    try:
        out.relative_to(repo)
    except ValueError:
        return
    probe = out / probe_name
    hit = subprocess.run(["git", "-C", str(repo), "check-ignore", "-q", str(probe)], capture_output=True)
    if hit.returncode != 0:
        rel = out.relative_to(repo).parts[0]
        exclude = subprocess.run(["git", "-C", str(repo), "rev-parse", "--git-path", "info/exclude"],
                                 capture_output=True, text=True).stdout.strip() or ".git/info/exclude"
        raise StagingError(f"{out} is inside the checkout and not ignored, so every device call would send what "
                           f"it holds: `mkdir -p {Path(exclude).parent} && echo /{rel}/ >> {exclude}` first")


def split(name: str, out: Path, piece_mb: float, from_file: str | None = None) -> dict:
    """Write `name`'s GGUF as pieces of at most `piece_mb` MiB plus the manifest; return the manifest."""
    if not 0 < piece_mb <= 64:
        raise StagingError(f"--piece-mb {piece_mb}: must be in (0, 64]; the device machine takes 64 MiB per call "
                           "including the working tree: `stage_model.py room` says what is left for a piece")
    path, recorded_size, recorded_sha, basis = source_of(name, from_file)
    piece_bytes = int(piece_mb * 2**20)
    out.mkdir(parents=True, exist_ok=True)
    for old in out.glob("piece-*.bin"):
        old.unlink()
    whole, pieces, total = hashlib.sha256(), [], 0
    with open(path, "rb") as f:
        while block := f.read(piece_bytes):
            i = len(pieces)
            (out / _piece_name(i)).write_bytes(block)
            whole.update(block)
            pieces.append({"name": _piece_name(i), "offset": total, "size": len(block),
                           "sha256": hashlib.sha256(block).hexdigest()})
            total += len(block)
    digest = whole.hexdigest()
    if recorded_sha is not None and (digest != recorded_sha or total != recorded_size):
        for p in pieces:
            (out / p["name"]).unlink()
        raise CorruptModelFileError(f"{path} has {total} bytes and SHA-256 {digest}, but rhea.modeling.zoo records "
                                    f"{recorded_size} bytes and {recorded_sha} for {name!r}; nothing staged. "
                                    f"Reinstall the model: rhea models install {name} --reinstall")
    manifest = {"model": name, "file_name": path.name if recorded_sha is None else zoo_mod.get_model(name).source.file_name,
                "size": total, "sha256": digest, "sha256_source": basis, "recorded_in_zoo": recorded_sha is not None,
                "piece_bytes": piece_bytes, "pieces": pieces, "source": str(path),
                "created": time.strftime("%Y-%m-%dT%H:%M:%S")}
    (out / MANIFEST).write_text(json.dumps(manifest, indent=1))
    return manifest


def load_manifest(staged: Path) -> dict:
    path = staged / MANIFEST
    if not path.is_file():
        raise StagingError(f"{staged} has no {MANIFEST}; stage the model first with "
                           f"`python scripts/stage_model.py split NAME --out {staged}` (and carry manifest.json too)")
    manifest = json.loads(path.read_text())
    zoo = zoo_mod.get_model(manifest["model"])  # UnknownModelError for a name this checkout does not know
    recorded = getattr(zoo.source, "sha256", None)
    if recorded is not None and (recorded != manifest["sha256"] or zoo.source.size != manifest["size"]):
        raise CorruptModelFileError(
            f"{path} describes {manifest['size']} bytes with SHA-256 {manifest['sha256']}, but rhea.modeling.zoo records "
            f"{zoo.source.size} bytes and {recorded} for {manifest['model']!r}: the pieces were split from another "
            f"file. Split again with `python scripts/stage_model.py split {manifest['model']} --out DIR`")
    return manifest


def status(staged: Path, hash_pieces: bool = True) -> dict:
    """{"present": [...], "missing": [...], "corrupt": [...], "next": first piece not present and intact}."""
    manifest = load_manifest(staged)
    report = {"model": manifest["model"], "pieces": len(manifest["pieces"]), "present": [], "missing": [],
              "corrupt": [], "bytes_present": 0, "bytes_total": manifest["size"]}
    for piece in manifest["pieces"]:
        path = staged / piece["name"]
        if not path.is_file():
            report["missing"].append(piece["name"])
        elif path.stat().st_size != piece["size"] or (hash_pieces and zoo_mod.sha256_of([path])[1] != piece["sha256"]):
            report["corrupt"].append(piece["name"])
        else:
            report["present"].append(piece["name"])
            report["bytes_present"] += piece["size"]
    todo = [p["name"] for p in manifest["pieces"] if p["name"] not in report["present"]]
    report["next"] = todo[0] if todo else None
    report["complete"] = not todo
    return report


class _StagedGGUF:
    """Stands in for a zoo entry's source when converting a staged GGUF (rhea.modeling.zoo.convert_to_cache)."""

    packages: tuple = ()

    def __init__(self, path: Path, sha256: str | None, size: int):
        self.path, self.sha256, self.size = path, sha256, size

    def gguf_path(self, model_name: str) -> Path:
        return self.path

    def missing_packages(self) -> list:
        return []

    def expected_size(self) -> int:
        return self.size


def default_target(manifest: dict) -> Path:
    return zoo_mod.cache_dir() / "gguf" / manifest["file_name"]


def assemble(staged: Path, out: Path | None = None, install: bool = True, convert: bool = False) -> dict:
    """Concatenate the staged pieces into `out` (default: the cache), verified; install/convert as asked."""
    manifest = load_manifest(staged)
    report = status(staged)
    if not report["complete"]:
        raise StagingError(f"{staged}: {len(report['missing'])} piece(s) missing ({', '.join(report['missing'][:5])}"
                           f"{'...' if len(report['missing']) > 5 else ''}) and {len(report['corrupt'])} corrupt "
                           f"({', '.join(report['corrupt'][:5])}); send {report['next']} next and re-run status")
    target = out or default_target(manifest)

    def check(size: int, digest: str, tmp: Path) -> None:
        if digest != manifest["sha256"] or size != manifest["size"]:
            raise CorruptModelFileError(
                f"the GGUF assembled from {staged} has {size} bytes and SHA-256 {digest}; expected {manifest['size']} "
                f"bytes and {manifest['sha256']} ({manifest['sha256_source']}). Nothing was installed; "
                f"re-send the pieces `status --staged {staged}` reports and assemble again")

    total, digest = zoo_mod.concatenate_checked([staged / p["name"] for p in manifest["pieces"]], target, check)
    result = {"model": manifest["model"], "gguf": str(target), "bytes": total, "sha256": digest,
              "sha256_source": manifest["sha256_source"], "converted": None}
    zoo = zoo_mod.get_model(manifest["model"])
    packaged = getattr(zoo.source, "sha256", None) is None
    if install and (convert or packaged):
        staged_zoo = dataclasses.replace(zoo, source=_StagedGGUF(target, getattr(zoo.source, "sha256", None), total))
        result["converted"] = str(zoo_mod.convert_to_cache(staged_zoo))
    return result


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("split", help="write NAME's GGUF as pieces + manifest.json")
    s.add_argument("name", help="a model-zoo name (rhea models list)")
    s.add_argument("--out", required=True, type=Path, help="folder for the pieces (e.g. .stage/NAME, git-ignored)")
    s.add_argument("--piece-mb", default="auto",
                   help="MiB per piece, or auto (default): what `room` leaves beside the working tree and --carry")
    s.add_argument("--carry", nargs="*", type=Path, default=[],
                   help="with auto: other paths each call carries beside the piece (e.g. .whl)")
    r = sub.add_parser("room", help="how many bytes a device call sends from this checkout, and the room for a piece")
    r.add_argument("--repo", type=Path, default=REPO)
    r.add_argument("--carry", nargs="*", type=Path, default=[], help="other paths each call carries (e.g. .whl)")
    s.add_argument("--from", dest="from_file", default=None, help="split this GGUF file instead of locating it")
    sub.add_parser("aside", help=f"move {', '.join(ASIDE_DEFAULT)} into {ASIDE_DIR}/ so calls do not send them"
                   ).add_argument("--paths", nargs="+", default=list(ASIDE_DEFAULT), help="paths relative to the checkout")
    sub.add_parser("back", help="move what `aside` moved back into place")
    st = sub.add_parser("status", help="which pieces are present, missing or corrupt")
    st.add_argument("--staged", required=True, type=Path)
    st.add_argument("--quick", action="store_true", help="check sizes only, do not hash the pieces")
    a = sub.add_parser("assemble", help="concatenate, verify the SHA-256, install into the cache")
    a.add_argument("--staged", required=True, type=Path)
    a.add_argument("--out", type=Path, default=None, help="GGUF path (default: $RHEA_CACHE/gguf/<file>)")
    a.add_argument("--no-install", action="store_true", help="only write and verify the GGUF; no conversion")
    a.add_argument("--convert", action="store_true",
                   help="also convert a split model into the model cache now (packaged models always are)")
    args = ap.parse_args(argv)
    try:
        if args.cmd == "aside":
            r = aside(REPO, args.paths)
            print(f"moved {r['bytes'] / 2**20:.1f} MiB aside ({', '.join(m['path'] for m in r['moved'])}) into "
                  f"{ASIDE_DIR}/; do not commit until `python scripts/stage_model.py back`")
            print(json.dumps(room(REPO), indent=1))
            return 0
        if args.cmd == "back":
            r = back(REPO)
            print(f"moved back: {', '.join(m['path'] for m in r['moved'])}")
            return 0
        if args.cmd == "room":
            r = room(args.repo, args.carry)
            print(json.dumps(r, indent=1))
            return 0 if r["piece_bytes"] > 0 else 1
        if args.cmd == "split":
            check_ignored(REPO, args.out)
            if args.piece_mb == "auto":
                r = room(REPO, args.carry)
                if r["piece_bytes"] < 2**20:
                    raise StagingError(f"the working tree ({r['tree_bytes'] / 2**20:.1f} MiB) and --carry "
                                       f"({r['carry_bytes'] / 2**20:.1f} MiB) leave {r['piece_mib']} MiB of the 64 MiB "
                                       "a device call takes; shrink what travels first")
                piece_mb = r["piece_bytes"] / 2**20
            else:
                try:
                    piece_mb = float(args.piece_mb)
                except ValueError:
                    raise StagingError(f"--piece-mb {args.piece_mb!r}: a number of MiB or auto") from None
            m = split(args.name, args.out, piece_mb, args.from_file)
            print(f"{m['model']}: {len(m['pieces'])} pieces of <= {m['piece_bytes'] / 2**20:.1f} MiB in {args.out} "
                  f"({m['size']} bytes, SHA-256 {m['sha256']}; {m['sha256_source']})")
        elif args.cmd == "status":
            r = status(args.staged, hash_pieces=not args.quick)
            print(json.dumps(r, indent=1))
            return 0 if r["complete"] else 1
        else:
            r = assemble(args.staged, args.out, install=not args.no_install, convert=args.convert)
            print(json.dumps(r, indent=1))
        return 0
    except RheaError as e:
        print(f"stage_model.py: {type(e).__name__}: {e}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())

"""Load one of the repository's scripts (benchmarks/, scripts/) as a module, for tests of their functions."""
import importlib.util
import sys
from pathlib import Path


def load_script(path: Path):
    """The module defined by the script at `path`, run once under a name of its own."""
    path = Path(path)
    name = "rhea_script_" + "_".join(path.with_suffix("").parts[-2:])
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module   # dataclasses defined in the script look their module up there
    spec.loader.exec_module(module)
    return module

"""Importing rhea must not start JAX through bm25s (on a GPU box JAX would take 75% of its memory)."""
import subprocess
import sys
import textwrap


def test_bm25s_import_leaves_jax_alone(tmp_path):
    fake = tmp_path / "jax"
    fake.mkdir()
    marker = tmp_path / "jax_was_imported"
    (fake / "__init__.py").write_text(f"open({str(marker)!r}, 'w').close()\n")
    (fake / "lax.py").write_text("def top_k(x, k):\n    raise RuntimeError('JAX backend started')\n")
    code = textwrap.dedent("""
        import sys
        import rhea.backends.retrieval as r
        import bm25s.selection
        assert r.bm25s is not None and not bm25s.selection.JAX_IS_AVAILABLE
        assert r.BM25Retriever(["cats purr", "dogs bark"]).search("cats", k=1)[0][0] == 0
        assert "jax" not in sys.modules
        import jax  # the program's own import still works afterwards
    """)
    env_path = f"{tmp_path}:{':'.join(p for p in sys.path if p)}"
    done = subprocess.run([sys.executable, "-c", code], env={"PYTHONPATH": env_path, "PATH": "/usr/bin:/bin"},
                          capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert marker.exists()  # created by the program's `import jax`, not by rhea's import of bm25s

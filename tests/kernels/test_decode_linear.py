"""`rhea_kernels.decode_linear` and the switch that routes a model's linear layers to it
(`decode_linears`, `RheaForCausalLM.decoding`). The op itself against its reference over shapes
and dtypes is in test_backends.py (harness spec ``decode_linear``)."""
import sys

import pytest
import torch

import rhea_kernels as rk
from rhea_kernels.decode_linear import MAX_ROWS, MIN_ROWS, ONE_ROW_MIN_WEIGHTS, decode_linear, decode_linears

dl_module = sys.modules["rhea_kernels.decode_linear"]  # the attribute rhea_kernels.decode_linear is the function


def _needs_cpp():
    if not dl_module.available():
        pytest.skip("no C++ CPU kernel for decode_linear (build with RHEA_BUILD_EXT=1)")


@pytest.fixture
def calls(monkeypatch):
    """How many calls reached the op through a routed layer."""
    seen = []
    real = dl_module._kernel

    def spy(x, weight, bias):
        seen.append(tuple(x.shape))
        return real(x, weight, bias)

    monkeypatch.setattr(dl_module, "_kernel", spy)
    return seen


def test_op_checks_its_arguments_by_name():
    with pytest.raises(ValueError, match="disagree on K"):
        decode_linear(torch.ones(2, 3), torch.ones(4, 5))
    with pytest.raises(ValueError, match=r"bias must be \[N\] = \[4\]"):
        decode_linear(torch.ones(2, 3), torch.ones(4, 3), torch.ones(3))
    with pytest.raises(ValueError, match=r"weight must be \[N, K\]"):
        decode_linear(torch.ones(2, 3), torch.ones(3))


@pytest.mark.parametrize("rows", [1, 2, 9])
def test_op_leaves_its_inputs_alone(rows):
    """The output starts as a copy of the bias: one row's expanded bias is the bias itself, and summing into it
    would change the layer's parameter on every call."""
    _needs_cpp()
    g = torch.Generator().manual_seed(2)
    x, w, b = torch.randn(rows, 20, generator=g), torch.randn(7, 20, generator=g), torch.randn(7, generator=g)
    saved = [t.clone() for t in (x, w, b)]
    first = decode_linear(x, w, b)
    assert torch.allclose(decode_linear(x, w, b), first) and torch.allclose(first, x @ w.t() + b, atol=1e-5)
    assert all(torch.equal(t, s) for t, s in zip((x, w, b), saved))


def test_op_with_no_columns_gives_the_bias_per_row():
    _needs_cpp()
    x, w, b = torch.ones(2, 3, 0), torch.ones(4, 0), torch.arange(4.0)
    assert torch.equal(decode_linear(x, w, b), torch.nn.functional.linear(x, w, b))
    assert decode_linear(x, w).shape == (2, 3, 4)


def test_op_takes_strided_weight_rows_and_non_contiguous_inputs():
    _needs_cpp()
    g = torch.Generator().manual_seed(1)
    big = torch.randn(10, 40, generator=g)
    w = big[:, :33]  # rows of 33 floats 40 apart: a view, not contiguous
    x = torch.randn(33, 5, generator=g).t()  # [5, 33], column-major
    assert not w.is_contiguous() and not x.is_contiguous()
    assert torch.allclose(decode_linear(x, w), x @ w.t(), atol=1e-5)
    wt = torch.randn(33, 10, generator=g).t()  # columns contiguous: goes to at::linear
    assert torch.allclose(decode_linear(x, wt), x @ wt.t(), atol=1e-5)


def test_layers_route_short_inputs_only_and_are_restored(calls):
    _needs_cpp()
    torch.manual_seed(0)
    net = torch.nn.Sequential(torch.nn.Linear(24, 40), torch.nn.ReLU(), torch.nn.Linear(40, 8, bias=False))
    short, long, one = torch.randn(2, 1, 24), torch.randn(3, MAX_ROWS, 24), torch.randn(1, 1, 24)  # 2, 48, 1 rows
    assert MIN_ROWS == 1
    with torch.no_grad():
        want_short, want_long, want_one = net(short), net(long), net(one)
        with decode_linears(net) as n:
            assert n == 2
            got_short, got_long, got_one = net(short), net(long), net(one)
    assert calls == [(2, 1, 24), (2, 1, 40)]  # the long input, and one row of these small layers, stayed with F.linear
    assert torch.allclose(got_short, want_short, atol=1e-6) and torch.equal(got_long, want_long)
    assert torch.equal(got_one, want_one)
    with torch.no_grad(), decode_linears(net, one_row_min_weights=0):
        net(one)
    assert calls[-2:] == [(1, 1, 24), (1, 1, 40)]
    with torch.no_grad(), decode_linears(net, min_rows=2, one_row_min_weights=0):
        net(one)
    assert len(calls) == 4  # min_rows=2: one row stays with F.linear whatever the layer's size
    assert all("forward" not in vars(m) for m in net.modules())


def test_one_row_goes_to_the_op_for_a_large_layer(calls):
    _needs_cpp()
    big = torch.nn.Linear(1024, ONE_ROW_MIN_WEIGHTS // 1024, bias=False)  # exactly ONE_ROW_MIN_WEIGHTS weights
    x = torch.randn(1, 1024)
    with torch.no_grad():
        want = big(x)
        with decode_linears(big):
            got = big(x)
    assert calls == [(1, 1024)] and torch.allclose(got, want, atol=1e-4)


def test_autograd_keeps_f_linear(calls):
    _needs_cpp()
    layer = torch.nn.Linear(6, 3)
    x = torch.randn(2, 6, requires_grad=True)
    with decode_linears(layer):
        layer(x).sum().backward()
    assert calls == [] and x.grad is not None and layer.weight.grad is not None


def test_other_dtypes_hooks_and_subclasses_are_left_alone(calls):
    _needs_cpp()

    class Scaled(torch.nn.Linear):
        def forward(self, x):
            return 2 * super().forward(x)

    half = torch.nn.Linear(4, 4).to(torch.bfloat16)
    hooked = torch.nn.Linear(4, 4)
    hooked.forward = lambda x: torch.zeros(1)  # another library's replacement forward
    net = torch.nn.ModuleList([half, hooked, Scaled(4, 4), torch.nn.Linear(4, 4)])
    with torch.no_grad(), decode_linears(net) as n:
        assert n == 2  # the bf16 layer is routed but keeps F.linear at call time; the fp32 plain layer runs the op
        half(torch.randn(2, 4, dtype=torch.bfloat16))
        assert torch.equal(hooked(torch.randn(2, 4)), torch.zeros(1))
        net[3](torch.randn(2, 4))
    assert calls == [(2, 4)]
    assert "forward" in vars(hooked) and "forward" not in vars(net[3])


def test_nested_blocks_route_once_and_exceptions_restore():
    _needs_cpp()
    layer = torch.nn.Linear(4, 4)
    with pytest.raises(RuntimeError, match="boom"):
        with decode_linears(layer) as outer:
            with decode_linears(layer) as inner:
                assert (outer, inner) == (1, 0)
            assert "forward" in vars(layer)
            raise RuntimeError("boom")
    assert "forward" not in vars(layer)


def test_nothing_is_routed_without_the_kernel(monkeypatch):
    monkeypatch.setattr(dl_module, "available", lambda: False)
    layer = torch.nn.Linear(4, 4)
    with decode_linears(layer) as n:
        assert n == 0 and "forward" not in vars(layer)


@pytest.mark.parametrize("bad", [0, -1, 2.5, True])
@pytest.mark.parametrize("name", ["min_rows", "max_rows"])
def test_row_bounds_are_checked(name, bad):
    with pytest.raises(ValueError, match=name):
        with decode_linears(torch.nn.Linear(2, 2), **{name: bad}):
            pass


def test_min_rows_above_max_rows_is_named():
    with pytest.raises(ValueError, match="min_rows=8 > max_rows=4"):
        with decode_linears(torch.nn.Linear(2, 2), min_rows=8, max_rows=4):
            pass


def test_rhea_generate_decodes_with_the_kernel_and_the_same_tokens(calls):
    """A tiny Rhea model: greedy tokens with the kernel equal those without; only decoding steps use it."""
    _needs_cpp()
    from rhea.testing import tiny_rhea

    model = tiny_rhea()
    assert model.decode_kernel is None and model.decodes_with_kernel  # the CPU default
    torch.manual_seed(0)
    ids = torch.randint(5, 100, (3, 20))
    mask = torch.ones_like(ids)
    mask[0, :6] = 0  # left padding
    model.decode_kernel = False
    want = model.generate(ids, attention_mask=mask, max_new_tokens=6, do_sample=False)
    assert calls == []
    model.decode_kernel = None
    got = model.generate(ids, attention_mask=mask, max_new_tokens=6, do_sample=False)
    assert torch.equal(got, want)
    assert calls and all(shape[:2] == (3, 1) for shape in calls)  # decoding steps: one token per row
    assert all("forward" not in vars(m) for m in model.modules())


def test_hf_generator_uses_the_kernel_for_plain_models(calls):
    """Batched replies (a judge's or K summaries') decode through the kernel; one reply's steps keep BLAS's GEMV."""
    _needs_cpp()
    from rhea.backends.llm import HFGenerator
    from rhea.testing import tiny_rhea

    model = tiny_rhea()
    chats = [[{"role": "user", "content": "hi"}], [{"role": "user", "content": "say something longer"}]]
    plain = HFGenerator(model.base_model, model.tokenizer)
    texts = HFGenerator.generate_batch([plain, plain], chats, max_new_tokens=4)
    assert len(texts) == 2 and calls and all(shape[0] == 2 for shape in calls)
    calls.clear()
    plain.generate(chats[0], max_new_tokens=4)
    assert calls and all(shape[:2] == (1, 6) for shape in calls)  # the 6-token prompt; its 1-row steps keep BLAS
    rhea_gen = HFGenerator(model, adapter="generate")
    HFGenerator.generate_batch([rhea_gen, rhea_gen], chats, max_new_tokens=4)
    assert calls


def test_cpu_op_is_what_the_library_reports():
    assert rk.OPS["decode_linear"].cpu_backend == ("cpp" if dl_module.available() else "reference")


@pytest.mark.parametrize("bad", [-1, 2.5, True])
def test_one_row_min_weights_is_checked(bad):
    with pytest.raises(ValueError, match="one_row_min_weights"):
        with decode_linears(torch.nn.Linear(2, 2), one_row_min_weights=bad):
            pass

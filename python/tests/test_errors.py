"""Every input check gives a clear message and the right Python exception type."""
import pytest
import torch

import convkit

X = torch.randn(2, 4, 8, 8)
W = torch.randn(6, 4, 3, 3)


def conv(**kw):
    args = dict(x=X, weight=W)
    args.update(kw)
    return convkit.conv2d(**args)


CONV_ERRORS = [
    (dict(x=torch.randn(4, 8, 8)), ValueError, r"x must be a 4-D \[N, C, H, W\] tensor; got 3-D"),
    (dict(weight=torch.randn(6, 4, 3)), ValueError, r"weight must be a 4-D \[K, C/groups, R, S\]"),
    (dict(x=X.double(), weight=W.double()), TypeError, r"x has dtype Double; convkit computes in float32"),
    (dict(x=X.int(), weight=W.int()), TypeError, r"x has dtype Int"),
    (dict(weight=W.half()), TypeError, r"the weight has dtype Half but x has Float"),
    (dict(bias=torch.randn(6).double()), TypeError, r"the bias has dtype Double but x has Float"),
    (dict(bias=torch.randn(5)), ValueError, r"the bias must have shape \[6\]"),
    (dict(weight=torch.randn(6, 3, 3, 3)), ValueError, r"with groups=1 x needs 3 channels; it has 4"),
    (dict(weight=torch.randn(6, 2, 3, 3), groups=3), ValueError, r"with groups=3 x needs 6 channels"),
    (dict(weight=torch.randn(5, 2, 3, 3), groups=2), ValueError, r"5 output channels cannot be split into groups=2"),
    (dict(groups=0), ValueError, r"groups must be at least 1"),
    (dict(padding=-1), ValueError, r"padding must be non-negative"),
    (dict(stride=0), ValueError, r"stride"),
    (dict(dilation=0), ValueError, r"dilation"),
    (dict(weight=torch.randn(6, 4, 9, 9)), ValueError, r"convkit.conv2d: "),
    (dict(residual=torch.randn(2, 6, 5, 5)), ValueError, r"the residual must have the output's shape \[2, 6, 6, 6\]"),
    (dict(residual=torch.randn(2, 6, 6, 6).half()), TypeError, r"the residual has dtype Half"),
    (dict(activation="tanh"), ValueError, r"tanh"),
    (dict(algo="no_such_algo"), ValueError, r"unknown algorithm 'no_such_algo'"),
    (dict(stride=[1, 2, 3]), ValueError, r"stride must be an int or a pair of ints"),
]


@pytest.mark.parametrize("kwargs,exc,pattern", CONV_ERRORS, ids=[p for _, _, p in CONV_ERRORS])
def test_conv2d_errors(kwargs, exc, pattern):
    with pytest.raises(exc, match=pattern):
        conv(**kwargs)


def test_conv2d_error_messages_name_the_op():
    with pytest.raises(ValueError) as e:
        conv(bias=torch.randn(5))
    assert str(e.value).startswith("convkit.conv2d: ")


def test_conv2d_algorithm_for_another_device():
    # CUDA build: "cuda_ref runs on cuda but the tensors are on cpu"; CPU-only build: an unknown name.
    with pytest.raises((NotImplementedError, ValueError), match="cuda_ref"):
        conv(algo="cuda_ref")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a GPU")
def test_mixed_devices():
    with pytest.raises(ValueError, match="all tensors must be on one device"):
        conv(weight=W.cuda())
    with pytest.raises(ValueError, match="all tensors must be on one device"):
        convkit.vector_add(torch.ones(3), torch.ones(3, device="cuda"))
    with pytest.raises(ValueError, match="all tensors must be on one device"):
        convkit.csr_matvec(torch.ones(1), torch.tensor([0, 1]), torch.tensor([0]), torch.ones(2, device="cuda"))


def test_unsupported_backend():
    # Sparse (or any other backend) tensors never reach convkit: the dispatcher names the op and the backend.
    with pytest.raises(NotImplementedError, match="convkit::vector_add.*Sparse"):
        convkit.vector_add(torch.ones(2).to_sparse(), torch.ones(2).to_sparse())


PS_X = torch.randn(2, 4, 8, 8)
PS_W = torch.randn(2, 6, 4, 3, 3)

PS_ERRORS = [
    (dict(weight=torch.randn(6, 4, 3, 3)), ValueError, r"weight must be a 5-D \[N, K, C/groups, R, S\]"),
    (dict(weight=torch.randn(3, 6, 4, 3, 3)), ValueError, r"holds 3 filter banks but x has 2 samples"),
    (dict(bias=torch.randn(6)), ValueError, r"the bias must have shape \[2, 6\]"),
    (dict(weight=PS_W.half()), TypeError, r"the weight has dtype Half"),
    (dict(x=PS_X[:, :3]), ValueError, r"x needs 4 channels; it has 3"),
    (dict(activation="swish"), ValueError, r"swish"),
]


@pytest.mark.parametrize("kwargs,exc,pattern", PS_ERRORS, ids=[p for _, _, p in PS_ERRORS])
def test_per_sample_errors(kwargs, exc, pattern):
    args = dict(x=PS_X, weight=PS_W)
    args.update(kwargs)
    with pytest.raises(exc, match=pattern):
        convkit.conv2d_per_sample(**args)


def test_per_sample_cpu_f16_is_unsupported():
    with pytest.raises(NotImplementedError, match="cpu_per_sample: it computes f32 only"):
        convkit.conv2d_per_sample(PS_X.half(), PS_W.half())


def test_example_op_errors():
    with pytest.raises(ValueError, match=r"a has shape \[3\] but b has shape \[4\]"):
        convkit.vector_add(torch.ones(3), torch.ones(4))
    with pytest.raises(TypeError, match="a has dtype Float but b has Double"):
        convkit.vector_add(torch.ones(3), torch.ones(3).double())
    with pytest.raises(TypeError, match="dtype Bool is not supported"):
        convkit.vector_add(torch.ones(3).bool(), torch.ones(3).bool())
    with pytest.raises(TypeError, match="silu needs a floating dtype"):
        convkit.silu(torch.ones(3, dtype=torch.int64))


V = torch.tensor([1.0, 2.0, 3.0])
RP = torch.tensor([0, 2, 3])
CI = torch.tensor([0, 2, 1])
D = torch.ones(3)

CSR_ERRORS = [
    (dict(row_ptr=torch.tensor([1, 2, 3])), ValueError, r"row_ptr\[0\] must be 0; it is 1"),
    (dict(row_ptr=torch.tensor([0, 2, 4])), ValueError, r"row_ptr\[-1\] must equal the number of stored values \(3\)"),
    (dict(row_ptr=torch.tensor([0, 2, 1, 3])), ValueError, r"row_ptr must be non-decreasing; row_ptr\[2\] = 1 < "
                                                           r"row_ptr\[1\] = 2"),
    (dict(row_ptr=torch.tensor([], dtype=torch.long)), ValueError, r"row_ptr must have rows \+ 1 >= 1 entries"),
    (dict(col_idx=torch.tensor([0, 3, 1])), ValueError, r"col_idx must lie in \[0, 3\).*found 3"),
    (dict(col_idx=torch.tensor([0, -1, 1])), ValueError, r"col_idx must lie in \[0, 3\).*found -1"),
    (dict(col_idx=torch.tensor([0, 1])), ValueError, r"col_idx has 2 entries but values has 3"),
    (dict(row_ptr=RP.int()), TypeError, r"col_idx has dtype Long but row_ptr has Int"),
    (dict(row_ptr=RP.short(), col_idx=CI.short()), TypeError, r"indices must be int32 or int64"),
    (dict(values=V.int()), TypeError, r"values has dtype Int; it must be floating"),
    (dict(dense=D.double()), TypeError, r"dense has dtype Double but values has Float"),
    (dict(dense=torch.ones(3, 1)), ValueError, r"dense must be 1-D"),
]


@pytest.mark.parametrize("kwargs,exc,pattern", CSR_ERRORS, ids=[p for _, _, p in CSR_ERRORS])
def test_csr_matvec_errors(kwargs, exc, pattern):
    args = dict(values=V, row_ptr=RP, col_idx=CI, dense=D)
    args.update(kwargs)
    with pytest.raises(exc, match=pattern):
        convkit.csr_matvec(**args)


def test_conv2d_module_errors():
    with pytest.raises(ValueError):
        convkit.nn.Conv2d(4, 4, 3, padding="middle")

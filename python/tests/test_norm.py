"""convkit.layer_norm / torch.ops.convkit.layer_norm_last / convkit.nn.LayerNorm and convkit.nn.layer_norm: the
values of F.layer_norm over the last dimension (within the rounding of the sums' order on CUDA, exactly torch's
on the CPU); torch's kernel (and its errors) for what the CUDA kernel does not take (a non-contiguous x, rows
off the 16-byte vector, more than 2048 channels, weights of another dtype, a gradient); convkit.fuse swaps
ConvNeXt's nn.LayerNorm and the F.layer_norm its LayerNorm2d traces to; torch.compile(fullgraph=True)
through it."""
import pytest
import torch
import torch.nn.functional as F

import convkit

DEVICES = ["cpu"] + (["cuda"] if torch.cuda.is_available() else [])
# (leading shape, C): ConvNeXt-T's four widths at 7x7, the kernel's lane counts' edges (4, 8, 16, 32 lanes a
# row), one row, an empty batch, and widths the kernel leaves to torch (rows off the 16-byte vector, > 2048)
CASES = [((2, 7, 7), 96), ((2, 7, 7), 192), ((1, 7, 7), 384), ((1, 7, 7), 768), ((3, 5), 8), ((3, 5), 128),
         ((3, 5), 136), ((2, 3), 256), ((2, 3), 264), ((2, 3), 512), ((2, 3), 520), ((2, 3), 1024),
         ((2, 3), 1032), ((2, 3), 2048), ((1,), 96), ((0, 4, 4), 96), ((2, 3), 100), ((2, 3), 4096)]


def _tol(dtype):
    return dict(rtol=1e-5, atol=1e-5) if dtype == torch.float32 else dict(rtol=1.6e-2, atol=1e-2)


@pytest.mark.parametrize("device", DEVICES)
@pytest.mark.parametrize("dtype", [torch.float32, torch.float16, torch.bfloat16])
@pytest.mark.parametrize("affine", ["both", "weight", "none"])
def test_matches_torch(device, dtype, affine):
    g = torch.Generator().manual_seed(1)
    for lead, c in CASES:
        x = (torch.randn(*lead, c, generator=g) * 3 + 1).to(device, dtype)
        w = (torch.rand(c, generator=g) + 0.5).to(device, dtype) if affine != "none" else None
        b = torch.randn(c, generator=g).to(device, dtype) if affine == "both" else None
        want = F.layer_norm(x.float(), (c,), None if w is None else w.float(), None if b is None else b.float(), 1e-6)
        y = convkit.layer_norm(x, w, b, 1e-6)
        assert y.shape == x.shape and y.dtype == dtype and y.is_contiguous()
        torch.testing.assert_close(y.float(), want, **_tol(dtype), msg=lambda m: f"{lead} x {c}: {m}")
        if device == "cpu":  # torch's own kernel
            assert torch.equal(y, F.layer_norm(x, (c,), w, b, 1e-6))


@pytest.mark.parametrize("device", DEVICES)
def test_what_the_kernel_does_not_take_runs_torchs(device):
    g = torch.Generator().manual_seed(2)
    x = torch.randn(2, 5, 5, 96, generator=g).to(device, torch.bfloat16)
    w = torch.rand(96, generator=g).to(device, torch.bfloat16)
    for xx, ww in ((x.permute(0, 2, 1, 3), w),      # not contiguous
                   (x[..., 1:], w[1:]),             # 95 channels: rows off the 16-byte vector
                   (x[1:], w),                       # contiguous, still aligned
                   (x, w.float())):                    # a float weight for a bf16 x: torch's rules
        try:
            want = F.layer_norm(xx, xx.shape[-1:], ww, None, 1e-5)
        except RuntimeError:
            with pytest.raises(RuntimeError):
                convkit.layer_norm(xx, ww, None, 1e-5)
            continue
        torch.testing.assert_close(convkit.layer_norm(xx, ww, None, 1e-5).float(), want.float(),
                                   **_tol(torch.bfloat16))
    with pytest.raises(RuntimeError):  # a weight of the wrong length: torch's error
        convkit.layer_norm(x, w[:8], None, 1e-5)
    with pytest.raises(RuntimeError):
        convkit.layer_norm(torch.tensor(1.0, device=device), None, None, 1e-5)


@pytest.mark.parametrize("device", DEVICES)
def test_modules_keep_torchs_gradient_and_shapes(device):
    ln = convkit.nn.LayerNorm.from_torch(torch.nn.LayerNorm(16).to(device))
    assert ln.weight.shape == (16,) and ln.weight.device.type == device
    x = torch.randn(2, 3, 16, device=device, requires_grad=True)
    ln(x).square().sum().backward()
    rx = x.detach().clone().requires_grad_()
    ref = torch.nn.LayerNorm(16).to(device)
    ref.load_state_dict(ln.state_dict())
    ref(rx).square().sum().backward()
    assert torch.allclose(x.grad, rx.grad, atol=1e-6) and torch.allclose(ln.weight.grad, ref.weight.grad, atol=1e-5)
    # a norm over two dimensions, or a normalized_shape that is not x's last: torch's
    two = torch.nn.LayerNorm((3, 16)).to(device)
    assert torch.equal(convkit.nn.layer_norm(x.detach(), (3, 16), two.weight, two.bias), two(x.detach()))
    with pytest.raises(RuntimeError):
        convkit.nn.layer_norm(x.detach(), (8,))
    no_affine = convkit.nn.LayerNorm.from_torch(torch.nn.LayerNorm(16, elementwise_affine=False))
    with torch.no_grad():
        torch.testing.assert_close(no_affine(x.detach().cpu()), F.layer_norm(x.detach().cpu(), (16,)))


def test_fuse_runs_convnexts_norms_on_convkit_and_compiles():
    torchvision = pytest.importorskip("torchvision")
    torch.manual_seed(0)
    m = torchvision.models.convnext_tiny().eval()
    for linears in (False, True):
        fused = convkit.fuse(m, linears=linears)
        summ = fused.convkit_summary
        # 18 blocks' nn.LayerNorm, and LayerNorm2d (traced to F.layer_norm) in the stem, the 3 downsamples and
        # the classifier
        assert summ.layer_norms == 23, str(summ)
        assert "23 LayerNorms by convkit" in str(summ)
        assert not any(type(mod) is torch.nn.LayerNorm for mod in fused.modules())
        x = torch.randn(2, 3, 64, 64)
        with torch.no_grad():
            want = m(x)
            rel = lambda y: ((y - want).norm() / want.norm()).item()  # noqa: E731
            assert rel(fused(x)) < 1e-4
            if not linears:
                assert rel(torch.compile(fused, fullgraph=True)(x)) < 1e-4

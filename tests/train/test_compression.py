"""Update compression stays within its error bound and round-trips shapes and dtypes."""

import torch

from train.comm.compression import INT8_BLOCK, dequantize_int8, quantize_int8


def test_int8_round_trip_is_within_half_a_step_per_block():
    torch.manual_seed(0)
    values = torch.randn(3 * INT8_BLOCK + 17) * torch.logspace(-3, 2, 3 * INT8_BLOCK + 17)  # wide dynamic range
    codes, scales = quantize_int8(values)
    assert codes.dtype == torch.int8 and len(scales) == 4 and codes.numel() == 4 * INT8_BLOCK
    restored = dequantize_int8(codes, scales, values)
    bound = scales.repeat_interleave(INT8_BLOCK)[: values.numel()] / 2
    assert restored.shape == values.shape and ((restored - values).abs() <= bound * (1 + 1e-6)).all()


def test_int8_keeps_shape_dtype_and_zeros():
    values = torch.zeros(4, 5, dtype=torch.float16)
    restored = dequantize_int8(*quantize_int8(values), like=values)
    assert restored.dtype == torch.float16 and restored.shape == (4, 5) and (restored == 0).all()

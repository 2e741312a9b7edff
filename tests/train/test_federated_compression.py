"""Federated deltas on the wire: int8 and top-k round trips stay within their bounds, error feedback loses nothing."""

import pytest
import torch

from train.comm.compression import INT8_BLOCK, decode_update, densify, encode_update, payload_bytes, topk_sparsify


def an_update(seed: int, size: int = 5 * INT8_BLOCK + 3) -> torch.Tensor:
    generator = torch.Generator().manual_seed(seed)
    return torch.randn(size, generator=generator) * torch.logspace(-4, 0, size)  # wide dynamic range


def test_uncompressed_payload_is_exact():
    update = an_update(0)
    payload, residual = encode_update(update, "none")
    assert residual is None and torch.equal(decode_update(payload, update), update)


def test_int8_payload_is_within_half_a_step_per_block_at_a_quarter_of_the_bytes():
    update = an_update(1)
    payload, residual = encode_update(update, "int8")
    restored = decode_update(payload, update)
    bound = torch.from_numpy(payload["scales"]).repeat_interleave(INT8_BLOCK)[: update.numel()] / 2
    assert residual is None and ((restored - update).abs() <= bound * (1 + 1e-6)).all()
    ratio = payload_bytes(payload) / payload_bytes(encode_update(update, "none")[0])
    assert 0.25 <= ratio < 0.27  # int8 codes + one float32 scale per block, padded to whole blocks


def test_topk_keeps_exactly_the_largest_entries():
    update = an_update(2)
    indices, kept = topk_sparsify(update, 0.01)
    k = -(-update.numel() // 100)
    assert len(indices) == k and indices.dtype == torch.int32 and (indices[1:] > indices[:-1]).all()
    assert kept.abs().min() >= update.abs().sort(descending=True).values[k - 1]
    dense = densify(indices, kept, update)
    assert torch.equal(dense[indices.long()], update[indices.long()]) and (dense != 0).sum() == k


@pytest.mark.parametrize("fraction", [0.01, 0.1])
def test_topk_error_feedback_sends_every_update_in_the_end(fraction):
    """Over many rounds: the sum of what was transmitted plus the residual equals the sum of the true updates."""
    residual, sent, true = None, torch.zeros(4000), torch.zeros(4000)
    for round_index in range(30):
        update = an_update(round_index, size=4000)
        payload, residual = encode_update(update, "topk", residual, topk_fraction=fraction)
        assert len(payload["indices"]) == 4000 * fraction
        sent += decode_update(payload, update)
        true += update
    torch.testing.assert_close(sent + residual, true, rtol=0, atol=1e-5)
    assert (sent != 0).sum() > 4000 * fraction  # the residual carried small entries into later rounds


def test_topk_payload_bytes_scale_with_the_fraction():
    update = an_update(3, size=100_000)
    dense = payload_bytes(encode_update(update, "none")[0])
    sparse = payload_bytes(encode_update(update, "topk", topk_fraction=0.01)[0])
    assert 0.019 < sparse / dense < 0.021  # an int32 index and a float32 value per kept entry


def test_an_unknown_method_is_refused():
    with pytest.raises(ValueError, match="unknown compression"):
        encode_update(torch.zeros(3), "fp4")

"""Optimizer state from shapes, worked by hand from each optimizer's definition."""

import pytest

from app import core
from app.core.errors import DomainError
from app.core.optimizers import optimizer_state_bytes, optimizer_state_bytes_from_count, paged_state_bytes
from app.core.warnings import paged_warnings

SHAPES = [(1024, 4096), (4096,)]
PARAMS = 1024 * 4096 + 4096


@pytest.mark.parametrize(
    ("optimizer", "expected"),
    [
        ("adam", 2 * PARAMS * 4),  # m and v (Kingma & Ba 2014, Algorithm 1)
        ("adamw", 2 * PARAMS * 4),
        ("sgd", 0),
        ("sgd-momentum", PARAMS * 4),
        ("lion", PARAMS * 4),  # one momentum (Chen et al. 2023, Algorithm 2)
        # Shazeer & Stern 2018, section 3: row (1024) + column (4096) statistics for the matrix,
        # the full second moment (4096) for the vector.
        ("adafactor", (1024 + 4096 + 4096) * 4),
    ],
)
def test_fp32_states(optimizer, expected):
    assert optimizer_state_bytes(optimizer, shapes=SHAPES, state_bits=32) == expected


def test_adafactor_momentum_adds_a_full_moment():
    without = optimizer_state_bytes("adafactor", shapes=SHAPES, state_bits=16)
    assert optimizer_state_bytes("adafactor", shapes=SHAPES, state_bits=16, adafactor_momentum=True) == without + PARAMS * 2


def test_8bit_adamw_block_scales_and_small_tensor_fallback():
    # bitsandbytes: two uint8 states plus one fp32 absmax per 256-element block each; tensors under
    # 4,096 elements keep two fp32 states. 10,000 elements -> 40 blocks.
    assert optimizer_state_bytes("adamw-8bit", shapes=[(100, 100)], state_bits=32) == 2 * (10_000 + 40 * 4)
    assert optimizer_state_bytes("adamw-8bit", shapes=[(100,)], state_bits=32) == 2 * 100 * 4


def test_count_only():
    assert optimizer_state_bytes_from_count("adamw", param_count=10, state_bits=32) == 80
    with pytest.raises(DomainError) as error:
        optimizer_state_bytes_from_count("adafactor", param_count=10, state_bits=32)
    assert error.value.field == "training.optimizer"


# bitsandbytes' paged optimizers (bitsandbytes 95f9af3, bitsandbytes/optim/optimizer.py): Optimizer2State.init_state
# makes fp32 states for optim_bits=32 and uint8 states with an fp32 absmax per 256 for optim_bits=8 (lines 492-529);
# get_state_buffer puts a state of 100,000+ elements in unified memory (F.get_paged), a smaller one in a plain tensor
# (lines 374-390).
def test_paged_32bit_adamw_keeps_fp32_moments_whatever_the_precision():
    assert optimizer_state_bytes("paged-adamw-32bit", shapes=SHAPES, state_bits=16) == 2 * PARAMS * 4


def test_paged_8bit_adamw_keeps_8bit_adamws_state():
    assert (optimizer_state_bytes("paged-adamw-8bit", shapes=SHAPES, state_bits=32)
            == optimizer_state_bytes("adamw-8bit", shapes=SHAPES, state_bits=32))


def test_what_pages_is_the_moments_of_tensors_of_100000_elements_or_more():
    # The 1024 × 4096 matrix's two moments page; the 4,096-element vector's and every block scale stay.
    assert paged_state_bytes("paged-adamw-32bit", shapes=SHAPES) == 2 * 1024 * 4096 * 4
    assert paged_state_bytes("paged-adamw-8bit", shapes=SHAPES) == 2 * 1024 * 4096 * 1
    assert paged_state_bytes("paged-adamw-8bit", shapes=[(99_999,)]) == 0
    assert paged_state_bytes("adamw-8bit", shapes=SHAPES) == 0


LLAMA2 = core.get_preset("llama-2-7b").architecture
# Llama-2-7B's 6,738,415,616 parameters: 65 norm weights of 4,096 (two a layer and the final one); the rest in
# tensors of 16,777,216 elements or more.
SMALL = 65 * 4096
LARGE = 6_738_415_616 - SMALL


def _estimate(optimizer: str, seq_len: int = 1024) -> core.Estimate:
    training = core.Training(seq_len=seq_len, precision=core.precision_preset("bf16"), optimizer=optimizer)
    return core.estimate(architecture=LLAMA2, training=training, gpu=core.get_gpu("a100-40gb"))


def test_a_paged_optimizers_large_states_leave_the_gpu_for_unified_memory():
    fp32 = _estimate("paged-adamw-32bit")
    assert fp32.per_gpu["optimizer_states"] == 2 * 4 * SMALL == 2_129_920
    assert fp32.host is not None and fp32.host.per_gpu["optimizer_states"] == 2 * 4 * LARGE == 53_905_195_008
    eight = _estimate("paged-adamw-8bit")
    # Every tensor has 4,096+ elements, so all are 8-bit: the small ones' bytes and every tensor's block scales stay.
    assert eight.per_gpu["optimizer_states"] == 2 * SMALL + 2 * 4 * ((LARGE + SMALL) // 256) == 211_107_968
    assert eight.host is not None and eight.host.per_gpu["optimizer_states"] == 2 * LARGE == 13_476_298_752


def test_paging_moves_the_state_from_the_verdict_to_a_warning():
    plain, paged = _estimate("adamw-8bit", 2048), _estimate("paged-adamw-8bit", 2048)
    assert plain.gpu is not None and not plain.gpu.fits
    assert paged.gpu is not None and paged.gpu.fits
    assert any("13,476,298,752 B of optimizer state are paged" in text and "over PCIe" in text
               for text in paged.warnings)


def test_the_paging_warning_states_the_traffic():
    # 6 GB that do not fit go out and come back: 12 GB a step at 16 GT/s × 16 lanes × 128/130 ÷ 8 B/s.
    (text,) = paged_warnings(10_000_000_000, free_bytes=4_000_000_000)
    assert "about 6,000,000,000 B go to host memory" in text and "about 0.38 s" in text
    (fits,) = paged_warnings(10_000_000_000, free_bytes=12_000_000_000)
    assert "stay on the GPU" in fits
    assert paged_warnings(0, free_bytes=None) == []

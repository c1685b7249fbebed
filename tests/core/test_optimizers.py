"""Optimizer state from shapes, worked by hand from each optimizer's definition."""

import pytest

from app.core.errors import DomainError
from app.core.optimizers import optimizer_state_bytes, optimizer_state_bytes_from_count

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

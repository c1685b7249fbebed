"""What a layer saves for backward, room by room; app/core/activations.py is their public face."""

"""Device kernels (the only package that imports triton). Imported lazily by :mod:`mrope.rotary`."""

from .mrope_rotary import mrope_rotary_decode_inplace, mrope_rotary_inplace

__all__ = ["mrope_rotary_decode_inplace", "mrope_rotary_inplace"]

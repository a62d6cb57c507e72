"""The cost models, one module each (``_``-prefixed modules are shared helpers), discovered by :mod:`..registry`."""

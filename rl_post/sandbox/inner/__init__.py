"""Code that runs inside the sandbox worker (stdlib only, no rl_post imports).

These modules are bind-mounted read-only into the worker's root and run by
the sandbox interpreter as top-level modules (``python -I -S zygote.py``),
so they must not import anything from ``rl_post`` or outside the stdlib.
"""

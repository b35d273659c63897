"""The tools a bug hunter runs (``python -m harness ...``): the command line (:mod:`.cli`),
``doctor``, ``bench``, ``replay``, ``repl``, ``matrix`` and ``malformed-report``, and
:mod:`.connect`, which stacks a QEMU, a driver, a channel and a session in one call."""

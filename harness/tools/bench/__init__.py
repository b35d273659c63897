"""Benchmarks: commands that print tables, never timed tests.

``bench rtt``, ``bench readdir`` and ``bench io`` measure variants: one or more QEMU binaries
(``--qemu A --qemu B``) on one or both guest-memory paths (``--guest-memory shared|qtest|both``).
A :class:`~harness.tools.bench.run.Run` measures every variant ``--rounds`` times, the variants
interleaved round by round so that a machine's drift hits them alike; the table gives each
variant's median, min and max and the ratio of medians to A. Each row also says where the time
went: QEMU's CPU time over the row's wall time, against the harness's (from /proc), in percent of
one core; ``bench rtt`` adds QEMU's CPU time per request, the server's cost whether or not the
client keeps it busy. ``--json FILE`` keeps every round, ``--plot FILE.png`` draws the medians.
Server time is from the kick reaching QEMU to the poll that finds the used entry; the rest of a
request's time is the harness's.

One module per benchmark (:mod:`.rtt`, :mod:`.readdir`, :mod:`.io`, :mod:`.suite`); what they
share: :mod:`.variant` (what a column measures, CPU accounting), :mod:`.report` (tables, JSON),
:mod:`.run` (the interleaving, the host's steal), :mod:`.plot`. A new benchmark is a module with a
function ``variant -> Table`` and a subcommand in ``harness/tools/cli.py``.
"""

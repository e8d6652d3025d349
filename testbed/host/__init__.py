"""The host layer: helper processes, commands in namespaces, the names a run gives
what it creates, cleanup by those names, kernel capabilities, host sysctls, nftables.

It knows nothing of what runs on it: it imports no part of the testbed but
:mod:`testbed.errors` (tests/unit/test_dependencies.py holds it to that).
"""

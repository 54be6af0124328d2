"""The test kit: what the tests and the benchmarks both use to set OmniPost up and watch it
(stores and engines, the command line in a subprocess, loopback servers for the providers,
Redis, virtual time, many tenants at once, the envelope a run is checked against).

A package of its own beside ``tests/`` and ``bench/``, installed with the project in
development, so that both import it by name; the product never imports it (an import-linter
contract).
"""

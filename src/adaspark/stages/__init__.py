"""Pipeline stage entry points: one module per DVC stage, each with ``main(argv)``."""

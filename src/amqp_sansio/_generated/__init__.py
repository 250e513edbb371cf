"""Code generated from the spec files in ``spec/`` by ``tools/gen_spec.py``."""

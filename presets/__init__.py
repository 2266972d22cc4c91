"""Shepherd's bundled presets, installed as the package ``shepherd.presets``; `shepherd.graph.list_presets` lists them."""

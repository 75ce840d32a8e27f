"""Skafos' listener API (``StreamWatch``, ``EventListener``), served by kopf-rs' Rust engine.

This ``skafos`` package comes with the ``kopf-rs`` wheel. It is the operator framework of
ING's Skafos (github.com/ing-bank/skafos) re-implemented on kopf-rs' core, so that operators
written for Skafos run unchanged: ``from skafos.stream_watch import StreamWatch`` and
``from skafos.event_listener import EventListener``.

It is not the ``skafos`` distribution on PyPI, an unrelated project (a model-versioning
client) whose import name is the same: do not install both into one environment.
"""

"""Helpers for the tests and benchmarks of KPL Lab: throwaway servers it talks to."""

"""Converters from public benchmarks to the dataset format, one module per source."""

from bench.convert.common import ConvertStats, write_converted
from bench.convert.dulemon import convert_dulemon
from bench.convert.kdconv import convert_kdconv
from bench.convert.locomo import convert_locomo
from bench.convert.memdaily import convert_memdaily

__all__ = ["ConvertStats", "convert_dulemon", "convert_kdconv", "convert_locomo", "convert_memdaily", "write_converted"]

"""RelayCaching (paper 17): reusing agent A's decode-phase KV cache when agent B prefills.

Modules, one concern each:

* :mod:`~minirepro.papers.relaycaching.rope`: RoPE re-rotation of cached keys, cache checks.
* :mod:`~minirepro.papers.relaycaching.relay`: relay items from the substrate corpus, A's cache, full prefill.
* :mod:`~minirepro.papers.relaycaching.pipeline`: two-agent chat pipelines (A writes its note) for a chat model.
* :mod:`~minirepro.papers.relaycaching.blend`: B's prefill with a recompute schedule
  (``DynamicCache`` assembly), the reuse rate and FLOP count.
* :mod:`~minirepro.papers.relaycaching.select`: deviation, layer window, layer-0 probe, selectors.
* :mod:`~minirepro.papers.relaycaching.experiment`: :class:`Config`, the arms, :func:`run_experiment`.
* :mod:`~minirepro.papers.relaycaching.plots`: the figures.
"""

from minirepro.papers.relaycaching.blend import (
    BlendOutput,
    Schedule,
    blended_prefill,
    full_schedule,
    make_schedule,
    naive_schedule,
    prefill_flops,
    probe_flops,
    reuse_rate,
    reused_kv,
)
from minirepro.papers.relaycaching.experiment import ARMS, Config, Results, run_experiment
from minirepro.papers.relaycaching.pipeline import PipelineSpec, make_pipelines, make_specs
from minirepro.papers.relaycaching.plots import (
    plot_deviation,
    plot_profile,
    plot_time,
    plot_tradeoff,
)
from minirepro.papers.relaycaching.relay import (
    RelayItem,
    a_cache,
    full_prefill,
    make_items,
    split_relay,
)
from minirepro.papers.relaycaching.rope import check_cache_compatible, inv_freq_of, rerotate
from minirepro.papers.relaycaching.select import (
    cacheblend_detect,
    cacheblend_schedule,
    kv_deviation,
    layer0_probe,
    layer_window,
    random_tokens,
    relay_schedule,
    relay_tokens,
)

__all__ = [
    "ARMS", "BlendOutput", "Config", "RelayItem", "Results", "Schedule", "a_cache", "blended_prefill",
    "cacheblend_detect", "cacheblend_schedule", "check_cache_compatible", "full_prefill",
    "full_schedule", "inv_freq_of", "kv_deviation", "layer0_probe", "layer_window", "make_items",
    "make_pipelines", "make_schedule", "make_specs", "naive_schedule", "PipelineSpec", "plot_deviation", "plot_profile", "plot_time", "plot_tradeoff", "prefill_flops", "probe_flops", "random_tokens", "relay_schedule",
    "relay_tokens", "rerotate", "reuse_rate", "reused_kv", "run_experiment", "split_relay",
]

# Modules implementing the paper's steps; each public function names its equation (tests/unit/test_conventions.py).
METHOD_MODULES = ("rope", "relay", "pipeline", "blend", "select")

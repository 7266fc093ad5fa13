"""The lab: how the bundled models were trained (training/) and one-off GPU probes
(gpu_probes/). Not part of the installed package; it may import the engine, never the reverse."""

"""Evaluation of alphagrad, a tool package beside the library (nothing in ``alphagrad``,
``train`` or ``data_gen`` imports it). ``python -m eval`` writes the evaluation report
(:mod:`eval.report`; the order producers it runs are registered in :mod:`eval.methods`,
its plots drawn by :mod:`eval.plots`); ``python -m eval.readme_results`` puts a report's
summary into README or a model card; the ``bench_*`` modules and the studies
``hlo_report``, ``label_noise`` and ``loss_profile`` are run by hand; ``eval.targets``
judges the closed issues 13 and 14 on several reports. What several modules share is in
:mod:`eval.common`."""

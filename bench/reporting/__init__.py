"""The report generator: ``docs/benchmarks.md`` made from the benchmarks' JSON in ``docs/bench``
(``markdown.render`` fills ``templates/benchmarks.md.j2``; ``sections`` and a module per section
turn each JSON into the rows and figures the template shows). ``bench/report.py`` runs the
benchmarks and calls it; the measuring scripts beside this package know nothing of it.
"""

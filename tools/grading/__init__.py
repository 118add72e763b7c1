"""The grader: builds the graded exercises and grades submitted notebooks, locally, without Docker
(how an instructor uses it: ``tools/grading/README.md``).

``exercises`` builds the student notebooks, autograder zips and book pages from each chapter's
``exercises.md``; ``grader`` runs a grading (``python -m tools.grading``): ``collect`` finds and
reads the submissions (regular files only), ``judge`` runs each notebook's tests in a bounded
process of the grader's, ``student`` starts the student's process and speaks its protocol,
``results`` records each result as it comes and writes the CSV and JSON. ``worker`` is the
student's process, talking over ``wire`` (plain data only), inside a ``sandbox``;
``library_answers`` lists, per question, the library functions that would answer it.
Nothing here imports the rest of the grader: the sandbox mounts only ``worker`` and ``wire``.
"""

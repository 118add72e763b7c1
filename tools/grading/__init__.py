"""The grader: builds the graded exercises and grades submitted notebooks, locally, without Docker
(how an instructor uses it: ``tools/grading/README.md``).

``exercises`` builds the student notebooks, autograder zips and book pages from each chapter's
``exercises.md``; ``grader`` grades a folder of submissions into a CSV (``python -m tools.grading``);
``worker`` is the student's process it talks to, over ``wire`` (plain data only), inside a
``sandbox``; ``library_answers`` lists, per question, the library functions that would answer it.
Nothing here imports the rest of the grader: the sandbox mounts only ``worker`` and ``wire``.
"""

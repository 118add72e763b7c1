"""``python -m tools.grading AUTOGRADER_ZIP SUBMISSIONS_DIR -o grades.csv``: see ``tools.grading.grader``."""

import sys

from tools.grading.grader import main

sys.exit(main())

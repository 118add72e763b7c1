"""The book build: its configuration per build (``config``), the stored executed chapters it renders
(``executed``), the test run that records every chapter once for it (``nbrecord``, ordered by
``run_order``) and its per-chapter report (``report``)."""

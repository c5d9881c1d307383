import logging

# Tornado's own test runner silences the access log; its ExpectLog-based tests
# (which we reuse against our classes) fail on unexpected INFO records otherwise.
logging.getLogger("tornado.access").setLevel(logging.CRITICAL)

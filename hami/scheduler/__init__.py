"""HAMi scheduler extender: pure fit/score/usage/webhook/policy modules and the I/O around them."""

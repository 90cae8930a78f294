"""Tools of the book that work in any repository; each file stands on its own."""

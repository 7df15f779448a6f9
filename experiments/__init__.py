"""What to run: configs, built-in experiments, the command line, results store and plots."""

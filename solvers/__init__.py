"""How it moves: one ``simulate`` entry point over sphere-preserving integrators."""

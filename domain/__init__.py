"""TunePlane's pure model: no I/O, no clock reads, no randomness, standard library only."""

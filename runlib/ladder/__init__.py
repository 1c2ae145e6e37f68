"""The scaling ladder: small rungs trained and fitted to predict the target run's loss."""

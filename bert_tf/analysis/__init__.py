"""Attention analysis after Clark et al. 2019, "What Does BERT Look At?"."""

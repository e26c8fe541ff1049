"""The text-to-video model: procedural data, VQ tokenizer, LLaMA-style decoder with FastCar replay
and sparse attention, training, generation, and loading of the shipped or a Hugging Face checkpoint."""

"""Models: a Llama-style target and an EAGLE3 draft head, byte tokenizer, checkpoint loading."""

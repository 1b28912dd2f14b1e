"""Active-o3 (ICML 2026): GRPO for active perception, in miniature."""

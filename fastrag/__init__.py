"""fastrag: async retrieval SDK."""

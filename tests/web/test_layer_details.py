"""The activations explanation lists what one layer keeps, tensor by tensor."""

from fastapi.testclient import TestClient

from app.main import app

client = TestClient(app)


def test_eager_attention_lists_the_score_matrix():
    eager = client.get("/", params={"preset": "llama-3-8b", "attention": "eager"}).text
    flash = client.get("/", params={"preset": "llama-3-8b", "attention": "flash"}).text
    assert "What one layer keeps for backward" in eager
    assert "<code>attn.softmax</code>" in eager and "<code>attn.softmax</code>" not in flash
    assert "<code>attn.logsumexp</code>" in flash

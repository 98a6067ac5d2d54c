"""Pass 1's article cache (pipelines.corpus.article_cache): what pass 2 reads back is what pass 1 wrote."""
from __future__ import annotations

import io

from pipelines.corpus.article_cache import ChunkedCacheWriter, chunk_name, read_chunk
from pipelines.records import Article, LinkMention


class _Kept(io.BytesIO):
    def close(self) -> None:  # the writer closes its files; keep their bytes for the test
        pass


def _articles() -> list[Article]:
    return [
        Article(1, "Alpha", "Alpha is a Beta.", [LinkMention(11, 15, "Beta", "Beta")], 10),
        Article(1, "Alpha", "A later copy.", [], 11),  # a second copy of page 1: never split from the first
        Article(2, "Gamma", "Gämma and δ.", [LinkMention(0, 5, "Gämma", "Gamma"), LinkMention(10, 11, "δ", "Delta")]),
        Article(3, "Empty", "", [], None),
    ]


def test_chunks_give_back_the_articles_in_order_and_cut_between_page_ids():
    files: dict[str, _Kept] = {}

    def create(path: str) -> _Kept:
        files[path] = _Kept()
        return files[path]

    writer = ChunkedCacheWriter("cache", lambda a, b: f"{a}/{b}", create, 7, 100, chunk_articles=1)
    closed = [writer.add(article, dump_bytes=10 * i) for i, article in enumerate(_articles())]
    closed.append(writer.finish(50))
    chunks = [chunk for chunk in closed if chunk is not None]
    assert [c.path for c in chunks] == [f"cache/{chunk_name(7, i)}" for i in range(3)]
    assert [c.articles for c in chunks] == [2, 1, 1]  # page 1's two copies stay in one chunk
    back = [article for c in chunks for article in read_chunk(io.BytesIO(files[c.path].getvalue()))]
    assert back == _articles()
    assert all(type(link) is LinkMention for article in back for link in article.links)

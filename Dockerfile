# fastrag serve in a container (docker-compose.yml's `fastrag` service; docs/serve.md).
#   docker build -t fastrag .  &&  docker run -p 8080:8080 -v $PWD/deploy:/config fastrag
FROM python:3.11-slim
COPY . /src
# serve: FastAPI + uvicorn; postgres: the compose file's store. Add extras for other stores.
RUN pip install --no-cache-dir "/src[serve,postgres]" && rm -rf /src
EXPOSE 8080
ENTRYPOINT ["fastrag", "serve", "--host", "0.0.0.0", "--port", "8080"]
CMD ["--config", "/config/knowledge_bases.toml"]

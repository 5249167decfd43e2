// The user-assigned managed identity the Function App runs as: it reads Key Vault references,
// reaches Storage (AzureWebJobsStorage__*), publishes to Application Insights and, when
// deployed, calls Azure OpenAI. The Azure Bot cannot use it: the bot code authenticates to
// the Bot Connector and runs the SSO on-behalf-of exchange with an Entra app's client secret
// (MicrosoftAppId / MicrosoftAppPassword), so the bot keeps that app registration.

param name string
param location string
param tags object

resource identity 'Microsoft.ManagedIdentity/userAssignedIdentities@2023-01-31' = {
  name: name
  location: location
  tags: tags
}

output id string = identity.id
output name string = identity.name
output clientId string = identity.properties.clientId
output principalId string = identity.properties.principalId
